"""Fashion-MNIST from Debian's dataset-fashion-mnist, and the objective
report, for the PyTorch examples beside this file (Python finds it in the
folder of the script it runs)."""
import gzip
import json
import os
import struct
import time

import numpy as np
import torch


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    shape = (count,) + struct.unpack(">" + "I" * (dims - 1), data[8:4 * (dims + 1)])
    return np.frombuffer(data, dtype=np.uint8, offset=4 * (dims + 1)).reshape(shape)


def load(data_dir, split):
    """Images as float32 rows in [0, 1], labels as int64."""
    images = read_idx(os.path.join(data_dir, f"{split}-images-idx3-ubyte.gz"))
    labels = read_idx(os.path.join(data_dir, f"{split}-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return x, torch.from_numpy(labels.astype(np.int64))


def report_metric(tag, value, step):
    """What cloudml-hypertune's report_hyperparameter_tuning_metric writes."""
    path = os.environ.get("CLOUD_ML_HP_METRIC_FILE", "/tmp/hypertune/output.metrics")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    line = {tag: str(value), "global_step": str(step), "timestamp": time.time(),
            "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "0")}
    with open(path, "w") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")
