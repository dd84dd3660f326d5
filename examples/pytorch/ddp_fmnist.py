#!/usr/bin/env python3
"""Data-parallel Fashion-MNIST training with torch.distributed (gloo, CPU).

A trainer as PyTorch users write it: it knows nothing of kubetrain. Each
replica reads the rendezvous environment that kubetrain (like Kubeflow's
PyTorchJob) gives it -- MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK -- through
init_process_group's default env:// method, and DistributedDataParallel
averages the gradients.

Every step takes the next `--global_batch` examples of one fixed shuffle;
rank r trains on the r-th equal slice of them. The loss is the mean over the
slice, so the averaged gradient is the gradient of the mean loss over the
whole global batch: `--single` (one process, no process group) computes the
same curve, which the end-to-end test compares.

Writes to --output_path: weights-rank<R>.bin (every rank's final parameters,
float32, in order) and, from rank 0, curve.json (the global mean loss of
every step, and the test accuracy). Rank 0 reports the test accuracy through
the cloudml-hypertune metrics file ($CLOUD_ML_HP_METRIC_FILE), as the
cloudml-hypertune library writes it.
"""
import argparse
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from fmnist_data import load, report_metric


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--output_path", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--global_batch", type=int, default=96)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric_tag", default="accuracy")
    parser.add_argument("--single", action="store_true",
                        help="one process, no process group: the reference curve")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a few ranks share a few cores

    if args.single:
        rank, world = 0, 1
    else:
        dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
        rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"--global_batch {args.global_batch} does not split over {world} ranks")
    local_batch = args.global_batch // world
    print(f"rank {rank} of {world}: MASTER_ADDR={os.environ.get('MASTER_ADDR')} "
          f"MASTER_PORT={os.environ.get('MASTER_PORT')} LOCAL_RANK={os.environ.get('LOCAL_RANK')}",
          flush=True)

    x_train, y_train = load(args.data_dir, "train")
    x_test, y_test = load(args.data_dir, "t10k")
    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10))
    net = model if args.single else torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.learning_rate)
    order = np.random.RandomState(args.seed).permutation(len(x_train))

    curve = []
    for step in range(args.steps):
        start = step * args.global_batch
        batch = np.take(order, np.arange(start, start + args.global_batch), mode="wrap")
        mine = torch.from_numpy(batch[rank * local_batch:(rank + 1) * local_batch])
        loss = F.cross_entropy(net(x_train[mine]), y_train[mine])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        mean = loss.detach().clone()
        if not args.single:
            dist.all_reduce(mean)
            mean /= world
        curve.append(mean.item())
        if rank == 0 and (step + 1) % 100 == 0:
            print(f"step {step + 1}: loss {curve[-1]:.4f}", flush=True)

    with torch.no_grad():
        accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
    os.makedirs(args.output_path, exist_ok=True)
    weights = np.concatenate([p.detach().numpy().ravel() for p in model.parameters()])
    with open(os.path.join(args.output_path, f"weights-rank{rank}.bin"), "wb") as f:
        f.write(weights.astype(np.float32).tobytes())
    if rank == 0:
        with open(os.path.join(args.output_path, "curve.json"), "w") as f:
            json.dump({"loss": curve, "accuracy": accuracy, "world_size": world}, f)
        report_metric(args.metric_tag, accuracy, args.steps)
        print(f"Final metrics after {args.steps} steps, loss: {curve[-1]:.4f}, "
              f"accuracy: {accuracy:.4f}", flush=True)
    if not args.single:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
