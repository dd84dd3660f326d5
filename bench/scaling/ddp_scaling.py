"""PyTorch's side of bench/scaling: the same MLP (784-256-128-10, Adam) on
Fashion-MNIST, 2 processes x 1 thread with DistributedDataParallel over gloo
(batch 256 each) against 1 process x 2 threads (batch 512). Prints
  RESULT pytorch-<mode> <examples_per_sec>"""
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

DATA = "/usr/share/datasets/fashion-mnist"


def load():
    with gzip.open(f"{DATA}/train-images-idx3-ubyte.gz") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(f"{DATA}/train-labels-idx1-ubyte.gz") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))


def train(net, x, y, batch, steps, warmup, shard, shards):
    opt = torch.optim.Adam(net.parameters(), lr=0.001)
    loss_fn = nn.CrossEntropyLoss()
    xs, ys = x[shard::shards], y[shard::shards]
    n = xs.shape[0] // batch
    start = None
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        i = step % n
        opt.zero_grad()
        loss = loss_fn(net(xs[i * batch:(i + 1) * batch]), ys[i * batch:(i + 1) * batch])
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def ddp_worker(rank, port, steps, warmup, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    x, y = load()
    net = nn.parallel.DistributedDataParallel(model())
    seconds = train(net, x, y, 256, steps, warmup, rank, 2)
    if rank == 0:
        out.put(seconds)
    dist.destroy_process_group()


if __name__ == "__main__":
    port, steps, warmup = int(sys.argv[1]), int(sys.argv[2]), 10
    torch.set_num_threads(2)
    x, y = load()
    seconds = train(model(), x, y, 512, steps, warmup, 0, 1)
    print(f"RESULT pytorch-1x2threads {steps * 512 / seconds:.1f}", flush=True)
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.spawn(ddp_worker, args=(port, steps, warmup, q), nprocs=2, join=True)
    seconds = q.get()
    print(f"RESULT pytorch-2x1thread {steps * 512 / seconds:.1f}", flush=True)
