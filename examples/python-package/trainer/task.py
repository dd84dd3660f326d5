"""A trainer as a Cloud ML user packages it: `python3 -m trainer.task`.

It knows nothing of kubetrain. It reads its hyperparameters as flags
(--learning_rate, as Cloud ML appends them to a trial's args), writes to
--job-dir, learns its role from TF_CONFIG, and reports its objective the way
the cloudml-hypertune library does (report_hyperparameter_tuning_metric). Pure
Python: it runs in kubetrain's Python runtime image as it is.

The model: logistic regression by stochastic gradient descent on two
overlapping Gaussian blobs (a fixed seed, so every run sees the same data),
evaluated on held-out examples after every epoch.
"""
import argparse
import json
import math
import os
import random
import time

METRIC_TAG = "training/hptuning/metric"


class HyperTune:
    """What cloudml-hypertune's HyperTune writes: the file named by
    $CLOUD_ML_HP_METRIC_FILE, one JSON line per report (sorted keys, values
    as strings), the last 100 kept and the whole file rewritten each time.
    With the cloudml-hypertune package installed, `hypertune.HyperTune()` does
    the same."""

    def __init__(self):
        self.path = os.environ.get("CLOUD_ML_HP_METRIC_FILE", "/tmp/hypertune/output.metrics")
        self.reports = []

    def report_hyperparameter_tuning_metric(self, hyperparameter_metric_tag, metric_value,
                                            global_step=None):
        report = {hyperparameter_metric_tag: str(metric_value), "timestamp": time.time(),
                  "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "0")}
        if global_step is not None:
            report["global_step"] = str(int(global_step))
        self.reports = (self.reports + [report])[-100:]
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        with open(self.path, "w") as f:
            for r in self.reports:
                f.write(json.dumps(r, sort_keys=True) + "\n")


def make_data(count, rng):
    """Two classes, centred at (-1, -1) and (1, 1), spread 1.2."""
    data = []
    for i in range(count):
        label = i % 2
        centre = 1.0 if label else -1.0
        data.append((rng.gauss(centre, 1.2), rng.gauss(centre, 1.2), label))
    return data


def predict(w, x):
    z = w[0] * x[0] + w[1] * x[1] + w[2]
    return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--num_epochs", type=int, default=5)
    parser.add_argument("--job-dir", "--job_dir", dest="job_dir", default="")
    args = parser.parse_args()

    task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {})
    role, index = task.get("type", "master"), task.get("index", 0)
    if role not in ("master", "chief"):
        # This trainer runs on one replica; a worker or ps of a larger
        # cluster has nothing to do.
        print(f"{role}/{index}: nothing to do for this trainer")
        return

    rng = random.Random(7)
    train, test = make_data(400, rng), make_data(200, rng)
    w = [0.0, 0.0, 0.0]
    hpt = HyperTune()
    step = 0
    for epoch in range(1, args.num_epochs + 1):
        rng.shuffle(train)
        loss = 0.0
        for x0, x1, label in train:
            p = predict(w, (x0, x1))
            loss -= math.log(max(p if label else 1.0 - p, 1e-12))
            g = p - label
            w = [w[0] - args.learning_rate * g * x0, w[1] - args.learning_rate * g * x1,
                 w[2] - args.learning_rate * g]
            step += 1
        accuracy = sum((predict(w, (x0, x1)) > 0.5) == bool(label)
                       for x0, x1, label in test) / len(test)
        print(f"Train [{role}/{index}], epoch {epoch}, step {step}: loss: {loss / len(train):.4f}, "
              f"accuracy: {accuracy:.4f}", flush=True)
        hpt.report_hyperparameter_tuning_metric(METRIC_TAG, accuracy, step)

    if args.job_dir:
        os.makedirs(args.job_dir, exist_ok=True)
        with open(os.path.join(args.job_dir, "model.json"), "w") as f:
            json.dump({"weights": w, "accuracy": accuracy, "learning_rate": args.learning_rate,
                       "module": __file__}, f)
    print(f"Final metrics after {step} steps, accuracy: {accuracy:.4f}")


if __name__ == "__main__":
    main()
