#!/usr/bin/env python3
"""Elastic data-parallel Fashion-MNIST training, started by torchrun.

A trainer as torchrun's elastic users write it: torchrun's agent on every
node rendezvouses (PET_NNODES "min:max", PET_RDZV_*: what kubetrain, like
Kubeflow's elastic PyTorchJob, gives each node) and starts this script with
RANK, WORLD_SIZE and MASTER_ADDR of the current group. When a node is lost,
the agents on the others stop their workers and rendezvous again without it;
when a node joins, again with it. Each time this script starts over, so it
resumes from its last checkpoint instead of step 0.

Every step takes the next `--global_batch` examples of one fixed shuffle,
split evenly over however many ranks there are, so the arithmetic of a step
does not depend on the group's size (--global_batch must divide by each size
the group may have).

--checkpoint_dir must be shared by every node (the same folder on one
machine; on Kubernetes a volume all replicas mount, e.g. jobDir with
spec.outputStorage): after a new rendezvous, rank 0 may be another node than
the one that wrote the checkpoint. Rank 0 writes there
  checkpoint.pt     parameters and the step, every --checkpoint_every steps
  progress.jsonl    one line per start (the step it resumed from and the
                    group's size) and per checkpoint
and at the end reports the test accuracy through the cloudml-hypertune
metrics file ($CLOUD_ML_HP_METRIC_FILE).
"""
import argparse
import json
import os
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

from fmnist_data import load, report_metric


def log_progress(checkpoint_dir, record):
    record["time"] = time.time()
    with open(os.path.join(checkpoint_dir, "progress.jsonl"), "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def save_checkpoint(checkpoint_dir, model, step):
    # Written aside and renamed: a node lost while writing leaves the last
    # whole checkpoint.
    path = os.path.join(checkpoint_dir, "checkpoint.pt")
    torch.save({"model": model.state_dict(), "step": step}, path + ".tmp")
    os.replace(path + ".tmp", path)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data_dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--checkpoint_dir", required=True)
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--checkpoint_every", type=int, default=50)
    parser.add_argument("--global_batch", type=int, default=96)
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--metric_tag", default="accuracy")
    args = parser.parse_args()
    torch.set_num_threads(1)  # a few ranks share a few cores

    dist.init_process_group("gloo")  # env://, set by torchrun for this group
    rank, world = dist.get_rank(), dist.get_world_size()
    if args.global_batch % world:
        raise SystemExit(f"--global_batch {args.global_batch} does not split over {world} ranks")
    local_batch = args.global_batch // world
    os.makedirs(args.checkpoint_dir, exist_ok=True)

    torch.manual_seed(args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(784, args.hidden), torch.nn.ReLU(),
                                torch.nn.Linear(args.hidden, 10))
    # Rank 0 reads the checkpoint; DDP gives every rank its parameters and
    # the broadcast its step.
    start = torch.zeros(1, dtype=torch.int64)
    checkpoint = os.path.join(args.checkpoint_dir, "checkpoint.pt")
    if rank == 0 and os.path.exists(checkpoint):
        state = torch.load(checkpoint)
        model.load_state_dict(state["model"])
        start[0] = state["step"]
    dist.broadcast(start, src=0)
    first_step = int(start.item())
    net = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(net.parameters(), lr=args.learning_rate)
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    print(f"rank {rank} of {world}: from step {first_step} (torchrun restart {restart})",
          flush=True)
    if rank == 0:
        log_progress(args.checkpoint_dir, {"event": "start", "step": first_step,
                                           "world_size": world, "restart": restart})

    x_train, y_train = load(args.data_dir, "train")
    order = np.random.RandomState(args.seed).permutation(len(x_train))
    loss_sum = torch.zeros(1)
    for step in range(first_step, args.steps):
        begin = step * args.global_batch
        batch = np.take(order, np.arange(begin, begin + args.global_batch), mode="wrap")
        mine = torch.from_numpy(batch[rank * local_batch:(rank + 1) * local_batch])
        loss = F.cross_entropy(net(x_train[mine]), y_train[mine])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        loss_sum += loss.detach()
        done = step + 1
        if done % args.checkpoint_every == 0 or done == args.steps:
            dist.all_reduce(loss_sum)
            since = max(first_step, (done - 1) // args.checkpoint_every * args.checkpoint_every)
            mean = loss_sum.item() / world / (done - since)
            loss_sum.zero_()
            if rank == 0:
                save_checkpoint(args.checkpoint_dir, model, done)
                log_progress(args.checkpoint_dir, {"event": "checkpoint", "step": done,
                                                   "world_size": world, "loss": mean})
                print(f"step {done}: loss {mean:.4f} ({world} ranks)", flush=True)

    if rank == 0:
        x_test, y_test = load(args.data_dir, "t10k")
        with torch.no_grad():
            accuracy = (model(x_test).argmax(dim=1) == y_test).float().mean().item()
        log_progress(args.checkpoint_dir, {"event": "end", "step": args.steps,
                                           "world_size": world, "accuracy": accuracy})
        report_metric(args.metric_tag, accuracy, args.steps)
        print(f"Final metrics after {args.steps} steps, accuracy: {accuracy:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
