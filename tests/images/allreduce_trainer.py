"""A data-parallel trainer with nothing but Python's standard library, for
images without torch: it joins its group as torch.distributed's env://
rendezvous does (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and trains a
logistic regression on its slice of a fixed synthetic data set, averaging
the gradients of every rank at each step (rank 0 gathers and sends back the
mean). So every rank ends with the same weights, those of one process
training on the whole batch.

Rank 0 reports the test accuracy every 20 steps and at the end through the
cloudml-hypertune file ($CLOUD_ML_HP_METRIC_FILE), as the cloudml-hypertune
library writes it. Each rank prints a digest of its final weights, and
writes them to <--output_path>/weights-rank<R>.json when one is given.

Flags: --learning_rate=F (0.5), --steps=N (100), --output_path=DIR,
--job-dir DIR (ignored).
"""

import hashlib
import json
import math
import os
import random
import socket
import sys
import time

EXAMPLES = 600
FEATURES = 4


def flags(argv):
    values = {"learning_rate": "0.5", "steps": "100", "output_path": ""}
    for arg in argv:
        if arg.startswith("--") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            values[name] = value
    return float(values["learning_rate"]), int(values["steps"]), values["output_path"]


def data():
    """The same examples on every rank: a linear rule with label noise."""
    rng = random.Random(7)
    truth = [1.5, -2.0, 0.75, 1.0]
    examples = []
    for _ in range(EXAMPLES + 400):
        x = [rng.uniform(-1, 1) for _ in range(FEATURES)]
        margin = sum(w * v for w, v in zip(truth, x)) + 0.25
        label = 1 if margin + rng.gauss(0, 0.3) > 0 else 0
        examples.append((x, label))
    return examples[:EXAMPLES], examples[EXAMPLES:]


def predict(weights, x):
    z = weights[-1] + sum(w * v for w, v in zip(weights, x))
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, z))))


def gradient_sum(weights, examples):
    grad = [0.0] * (FEATURES + 1)
    for x, label in examples:
        error = predict(weights, x) - label
        for i in range(FEATURES):
            grad[i] += error * x[i]
        grad[-1] += error
    return grad


def accuracy(weights, examples):
    right = sum(1 for x, label in examples if (predict(weights, x) > 0.5) == (label == 1))
    return right / len(examples)


def send(sock, value):
    sock.sendall((json.dumps(value) + "\n").encode())


def receive(reader):
    line = reader.readline()
    if not line:
        raise ConnectionError("a rank of the group went away")
    return json.loads(line)


def join(rank, world, addr, port):
    """Rank 0: the other ranks' connections, in rank order; others: rank 0's."""
    if rank == 0:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("", port))
        server.listen(world)
        peers = {}
        while len(peers) < world - 1:
            conn, _ = server.accept()
            reader = conn.makefile("r")
            peers[receive(reader)["rank"]] = (conn, reader)
        server.close()
        return [peers[r] for r in sorted(peers)]
    deadline = time.time() + 120
    while True:
        try:
            conn = socket.create_connection((addr, port), timeout=5)
            conn.settimeout(None)
            break
        except OSError as error:
            if time.time() > deadline:
                sys.exit(f"rank {rank}: no rank 0 at {addr}:{port}: {error}")
            time.sleep(0.2)
    send(conn, {"rank": rank})
    return [(conn, conn.makefile("r"))]


def report(lines, value, step):
    path = os.environ.get("CLOUD_ML_HP_METRIC_FILE")
    if not path:
        return
    lines.append(json.dumps({"accuracy": str(value), "global_step": str(step),
                             "timestamp": time.time()}))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    learning_rate, steps, output_path = flags(sys.argv[1:])
    try:
        rank = int(os.environ["RANK"])
        world = int(os.environ["WORLD_SIZE"])
        addr = os.environ["MASTER_ADDR"]
        port = int(os.environ["MASTER_PORT"])
    except (KeyError, ValueError) as error:
        sys.exit(f"the env:// rendezvous needs RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: {error}")
    print(f"rank {rank} of {world}: MASTER_ADDR={addr} MASTER_PORT={port}", flush=True)
    train, test = data()
    mine = train[rank::world]
    peers = join(rank, world, addr, port)
    weights = [0.0] * (FEATURES + 1)
    reports = []
    for step in range(1, steps + 1):
        grad = gradient_sum(weights, mine)
        if rank == 0:
            for _, reader in peers:
                grad = [a + b for a, b in zip(grad, receive(reader))]
            mean = [g / len(train) for g in grad]
            for conn, _ in peers:
                send(conn, mean)
        else:
            send(peers[0][0], grad)
            mean = receive(peers[0][1])
        weights = [w - learning_rate * g for w, g in zip(weights, mean)]
        if rank == 0 and (step % 20 == 0 or step == steps):
            value = accuracy(weights, test)
            print(f"step {step}: test accuracy {value:.4f}", flush=True)
            report(reports, value, step)
    if output_path:
        os.makedirs(output_path, exist_ok=True)
        with open(os.path.join(output_path, f"weights-rank{rank}.json"), "w") as f:
            json.dump(weights, f)
    digest = hashlib.sha256(json.dumps(weights).encode()).hexdigest()[:16]
    print(f"rank {rank} done after {steps} steps: weights {digest}", flush=True)


if __name__ == "__main__":
    main()
