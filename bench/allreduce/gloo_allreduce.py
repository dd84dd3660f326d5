"""All-reduce of float32 buffers with torch.distributed's gloo backend, 2
processes on this host; prints RESULT lines like allreduce_bench."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SIZES = [4 << 10, 256 << 10, 4 << 20, 64 << 20]


def iters_for(nbytes):
    # Same counts as allreduce_bench.cc.
    if nbytes <= 64 << 10:
        return 2000
    if nbytes <= 1 << 20:
        return 400
    if nbytes <= 16 << 20:
        return 60
    return 12


def run(rank, world, port, sizes):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    for nbytes in sizes:
        data = torch.ones(nbytes // 4, dtype=torch.float32)
        for _ in range(3):
            dist.all_reduce(data)
        dist.barrier()
        iters = iters_for(nbytes)
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(data)
        seconds = (time.perf_counter() - start) / iters
        busbw = 2.0 * (world - 1) / world * nbytes / seconds / 1e9
        if rank == 0:
            print(f"RESULT gloo {nbytes} {iters} {seconds * 1e6:.2f} {busbw:.3f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    port = int(sys.argv[1])
    sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else SIZES
    mp.spawn(run, args=(2, port, sizes), nprocs=2, join=True)
