"""PyTorch and numpy peers of train_throughput_bench, on the same
Fashion-MNIST training images, shuffled each epoch, batch 128, float32:

  mlp: 784-256-128-10, ReLU, softmax cross-entropy, SGD lr 0.1
       (torch and numpy)
  cnn: the built-in cnn (examples/models/cnn.yaml): conv 3x3x32 SAME, relu,
       maxpool 2, conv 3x3x64 SAME, relu, maxpool 2, dense 128, relu,
       dropout 0.25, dense 10; Adam lr 0.001 (torch)

    peers.py torch|numpy THREADS STEPS [IMAGES.gz]        (the mlp)
    peers.py torch-cnn THREADS STEPS [IMAGES.gz]
    peers.py torch-accuracy THREADS EPOCHS   (mlp, Adam lr 0.001, test accuracy)

Thread counts must be fixed before numpy/torch load (OMP_NUM_THREADS,
OPENBLAS_NUM_THREADS): run.sh sets them. Prints one "key=value" line.
"""
import gzip
import os
import sys
import time

import numpy as np


def load(images_path):
    labels_path = images_path.replace("-images-idx3-ubyte", "-labels-idx1-ubyte")
    with gzip.open(images_path, "rb") as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 784).astype(np.float32) / 255.0
    with gzip.open(labels_path, "rb") as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8).astype(np.int64)
    return x, y


def batches(x, y, batch, seed):
    rng = np.random.default_rng(seed)
    while True:
        order = rng.permutation(len(x))
        for i in range(0, len(x), batch):
            idx = order[i:i + batch]
            yield x[idx], y[idx]


def glorot(rng, fan_in, fan_out):
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, (fan_in, fan_out)).astype(np.float32)


def run_numpy(x, y, steps, lr=0.1):
    rng = np.random.default_rng(1)
    sizes = [784, 256, 128, 10]
    w = [glorot(rng, a, b) for a, b in zip(sizes, sizes[1:])]
    b = [np.zeros(s, np.float32) for s in sizes[1:]]
    it = batches(x, y, 128, 1)

    def step():
        xb, yb = next(it)
        n = xb.shape[0]
        h1 = np.maximum(xb @ w[0] + b[0], 0)
        h2 = np.maximum(h1 @ w[1] + b[1], 0)
        z = h2 @ w[2] + b[2]
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        loss = -np.log(p[np.arange(n), yb]).mean()
        dz = p
        dz[np.arange(n), yb] -= 1
        dz /= n
        dw2 = h2.T @ dz
        dh2 = dz @ w[2].T
        dh2 *= h2 > 0
        dw1 = h1.T @ dh2
        dh1 = dh2 @ w[1].T
        dh1 *= h1 > 0
        dw0 = xb.T @ dh1
        for wi, g in zip(w, (dw0, dw1, dw2)):
            wi -= lr * g
        for bi, g in zip(b, (dh1.sum(0), dh2.sum(0), dz.sum(0))):
            bi -= lr * g
        return loss

    for _ in range(50):
        step()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = step()
    return (steps * 128 / (time.perf_counter() - start),
            steps * 128 / (time.process_time() - cpu_start), float(loss))


def run_torch(x, y, steps, threads, lr=0.1):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    xt = torch.from_numpy(x)
    yt = torch.from_numpy(y)
    it = batches(x, y, 128, 1)

    def step():
        xb, yb = next(it)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.from_numpy(xb)), torch.from_numpy(yb))
        loss.backward()
        opt.step()
        return loss

    for _ in range(50):
        step()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = step()
    return (steps * 128 / (time.perf_counter() - start),
            steps * 128 / (time.process_time() - cpu_start), float(loss.item()))


def run_torch_cnn(x, y, steps, threads):
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 7 * 7, 128), torch.nn.ReLU(), torch.nn.Dropout(0.25),
        torch.nn.Linear(128, 10))
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    images = x.reshape(-1, 1, 28, 28)
    it = batches(images, y, 128, 1)

    def step():
        xb, yb = next(it)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(torch.from_numpy(xb)), torch.from_numpy(yb))
        loss.backward()
        opt.step()
        return loss

    for _ in range(10):
        step()
    start, cpu_start = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = step()
    return (steps * 128 / (time.perf_counter() - start),
            steps * 128 / (time.process_time() - cpu_start), float(loss.item()))


def torch_accuracy(threads, epochs, folder="/usr/share/datasets/fashion-mnist"):
    """The accuracy reference for the engine: the same MLP and settings as
    `kubetrain-runtime train --model=mlp --optimizer=adam
    --learning_rate=0.001 --batch_size=128`, test accuracy per epoch."""
    import torch
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    x, y = load(folder + "/train-images-idx3-ubyte.gz")
    tx, ty = load(folder + "/t10k-images-idx3-ubyte.gz")
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 256), torch.nn.ReLU(),
        torch.nn.Linear(256, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()
    rng = np.random.default_rng(1)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(x))
        for i in range(0, len(x), 128):
            idx = order[i:i + 128]
            opt.zero_grad(set_to_none=True)
            loss_fn(model(torch.from_numpy(x[idx])), torch.from_numpy(y[idx])).backward()
            opt.step()
        with torch.no_grad():
            acc = (model(torch.from_numpy(tx)).argmax(1).numpy() == ty).mean()
        print(f"torch epoch={epoch} test_accuracy={acc:.4f}", flush=True)


def main():
    which, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if which == "torch-accuracy":
        torch_accuracy(threads, steps)
        return
    path = sys.argv[4] if len(sys.argv) > 4 else \
        "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
    x, y = load(path)
    if which == "numpy":
        rate, cpu_rate, loss = run_numpy(x, y, steps)
    elif which == "torch-cnn":
        rate, cpu_rate, loss = run_torch_cnn(x, y, steps, threads)
    else:
        rate, cpu_rate, loss = run_torch(x, y, steps, threads)
    print(f"{which} threads={threads} samples_per_sec={rate:.1f} "
          f"samples_per_cpu_sec={cpu_rate:.1f} loss={loss:.6f}", flush=True)


if __name__ == "__main__":
    main()
