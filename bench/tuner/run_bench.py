#!/usr/bin/python3
"""kubetrain's tuner against Optuna 3.1 (TPE, random) and scikit-learn GP + EI.

Same budgets, same seeds, same test functions (Branin 2-D, Hartmann6 6-D),
sequential (1 suggestion per step) and 4-way parallel (batches of 4 suggestions,
all evaluated before the next batch). Prints the median and quartiles of the
best simple regret after 50 and 100 trials per method, the fraction of seeds
with regret <= 0.1, the parallel/sequential ratio, and kubetrain's suggestion
latency with 100 and 1,000 completed trials in 6-D.

Run with Debian's Python (python3-optuna, python3-sklearn):
  /usr/bin/python3 bench/tuner/run_bench.py --driver build/bench/tuner/bench_tuner_driver
  ... --quick   (a smoke test: 2 seeds, 20 trials)
  ... --options '{"explore_every": 0}'   (kubetrain with BayesianOptions overrides)
  ... --methods kubetrain --functions hartmann6 --batches 1 --workers 1
                (one method, one function, sequential only: for iterating)

The 50-trial figures are the first 50 trials of the 100-trial runs: no method
here knows its budget, so the prefix is exactly a 50-trial run (with 4-way
batches, the 13th batch's first two suggestions are what a last batch of two
would be, for every method: all choose batch members greedily in order).
"""
import argparse
import concurrent.futures as cf
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
import warnings

import numpy as np

BRANIN_MIN = 0.397887357729738
HARTMANN6_MIN = -3.32236801141551


def branin(x):
    x0, x1 = x
    b, c, t = 5.1 / (4 * math.pi ** 2), 5 / math.pi, 1 / (8 * math.pi)
    return (x1 - b * x0 ** 2 + c * x0 - 6) ** 2 + 10 * (1 - t) * math.cos(x0) + 10


_H_ALPHA = np.array([1.0, 1.2, 3.0, 3.2])
_H_A = np.array([[10, 3, 17, 3.5, 1.7, 8], [0.05, 10, 17, 0.1, 8, 14],
                 [3, 3.5, 1.7, 10, 17, 8], [17, 8, 0.05, 10, 0.1, 14]])
_H_P = np.array([[0.1312, 0.1696, 0.5569, 0.0124, 0.8283, 0.5886],
                 [0.2329, 0.4135, 0.8307, 0.3736, 0.1004, 0.9991],
                 [0.2348, 0.1451, 0.3522, 0.2883, 0.3047, 0.6650],
                 [0.4047, 0.8828, 0.8732, 0.5743, 0.1091, 0.0381]])


def hartmann6(x):
    x = np.asarray(x, dtype=float)
    return float(-np.sum(_H_ALPHA * np.exp(-np.sum(_H_A * (x - _H_P) ** 2, axis=1))))


FUNCTIONS = {
    "branin": (branin, [(-5.0, 10.0), (0.0, 15.0)], BRANIN_MIN),
    "hartmann6": (hartmann6, [(0.0, 1.0)] * 6, HARTMANN6_MIN),
}


# ---- methods: each returns the list of objective values in trial order ----

def run_kubetrain(driver, fname, trials, batch, seed, options=None):
    config = {"function": fname, "trials": trials, "batch": batch, "seeds": [seed]}
    if options:
        config["options"] = options
    out = subprocess.run([driver], input=json.dumps(config), capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout)["results"][0]["values"]


def run_optuna(sampler_name, fname, trials, batch, seed):
    import optuna
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    warnings.filterwarnings("ignore")
    f, bounds, _ = FUNCTIONS[fname]
    if sampler_name == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        sampler = optuna.samplers.RandomSampler(seed=seed)
    study = optuna.create_study(direction="minimize", sampler=sampler)
    values = []
    while len(values) < trials:
        n = min(batch, trials - len(values))
        # Optuna samples when a parameter is suggested: every trial of the
        # batch draws its point before any of them is told its value.
        asked = [study.ask() for _ in range(n)]
        points = [[t.suggest_float(f"x{d}", lo, hi) for d, (lo, hi) in enumerate(bounds)]
                  for t in asked]
        for t, x in zip(asked, points):
            y = f(x)
            study.tell(t, y)
            values.append(y)
    return values


def run_sklearn(fname, trials, batch, seed, restarts):
    """GP (constant x Matern-5/2 ARD, normalised targets) + expected improvement:
    Latin hypercube start, EI over 1,000 random + 200 local candidates, L-BFGS-B
    refinement of the best 2, constant liar (the best value) for batches. One
    likelihood optimisation per fit (no restarts) to keep the bench short."""
    from scipy.optimize import minimize
    from scipy.stats import norm, qmc
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import ConstantKernel, Matern
    warnings.filterwarnings("ignore")
    f, bounds, _ = FUNCTIONS[fname]
    d = len(bounds)
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    rng = np.random.default_rng(seed)
    n_init = min(10, max(5, d + 3))
    X = list(qmc.LatinHypercube(d=d, seed=seed).random(n_init))
    values = []
    unit_x = []
    while len(values) < trials:
        n = min(batch, trials - len(values))
        if len(unit_x) < n_init:
            batch_x = [X[len(unit_x) + i] for i in range(min(n, n_init - len(unit_x)))]
        else:
            batch_x = []
            xs = np.array(unit_x)
            ys = np.array(values)
            lie = ys.min()
            for _ in range(n):
                kernel = ConstantKernel(1.0, (1e-3, 1e3)) * Matern(
                    length_scale=np.full(d, 0.5), length_scale_bounds=(1e-3, 1e2), nu=2.5)
                gp = GaussianProcessRegressor(kernel=kernel, alpha=1e-6, normalize_y=True,
                                              n_restarts_optimizer=restarts,
                                              random_state=int(rng.integers(1 << 30)))
                gp.fit(xs, ys)
                best = ys.min()

                def neg_ei(z):
                    z = np.atleast_2d(z)
                    mu, sd = gp.predict(z, return_std=True)
                    sd = np.maximum(sd, 1e-12)
                    u = (best - mu) / sd
                    return -((best - mu) * norm.cdf(u) + sd * norm.pdf(u))

                cands = rng.random((1000, d))
                order = np.argsort(ys)[:2]
                local = np.clip(xs[order].repeat(100, axis=0) +
                                rng.normal(0, 0.05, (len(order) * 100, d)), 0, 1)
                cands = np.vstack([cands, local])
                scores = neg_ei(cands)
                starts = cands[np.argsort(scores)[:2]]
                best_x, best_s = starts[0], scores.min()
                for s in starts:
                    r = minimize(lambda z: float(neg_ei(z)[0]), s, method="L-BFGS-B",
                                 bounds=[(0, 1)] * d, options={"maxiter": 50})
                    if r.fun < best_s:
                        best_x, best_s = r.x, r.fun
                batch_x.append(np.clip(best_x, 0, 1))
                xs = np.vstack([xs, batch_x[-1]])
                ys = np.append(ys, lie)
        for u in batch_x:
            unit_x.append(np.asarray(u))
            values.append(f(lo + np.asarray(u) * (hi - lo)))
    return values


def run_task(task):
    method, fname, trials, batch, seed, driver, restarts, options = task
    # CPU time of this process and of the driver it runs.
    start = time.process_time() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    if method == "kubetrain":
        values = run_kubetrain(driver, fname, trials, batch, seed, options)
    elif method == "optuna-tpe":
        values = run_optuna("tpe", fname, trials, batch, seed)
    elif method == "optuna-random":
        values = run_optuna("random", fname, trials, batch, seed)
    else:
        values = run_sklearn(fname, trials, batch, seed, restarts)
    end = time.process_time() + resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime
    return task, values, end - start


def quartiles(xs):
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return q[0], statistics.median(xs), q[2]


def sign_test(wins, losses):
    """Two-sided exact sign test: the chance of a split at least this uneven
    between two equally good methods (ties left out)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(wins, losses) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--driver", default=os.path.join(
        here, "..", "..", "build", "bench", "tuner", "bench_tuner_driver"))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--sklearn-seeds", type=int, default=None,
                        help="seeds for the (slow) scikit-learn baseline; default --seeds")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--methods", default="kubetrain,optuna-tpe,optuna-random,sklearn-gp-ei")
    parser.add_argument("--functions", default=",".join(FUNCTIONS),
                        help="comma-separated subset of " + ",".join(FUNCTIONS))
    parser.add_argument("--batches", default="1,4",
                        help="comma-separated suggestions per batch (1 = sequential)")
    parser.add_argument("--no-latency", action="store_true",
                        help="skip kubetrain's suggestion-latency measurement")
    parser.add_argument("--options", type=json.loads, default=None,
                        help="BayesianOptions overrides for kubetrain, as JSON "
                             "(see bench_tuner_driver.cc), e.g. '{\"explore_every\": 0}'")
    parser.add_argument("--json", help="write all raw values here")
    parser.add_argument("--quick", action="store_true", help="smoke test: 2 seeds, 20 trials")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.trials = 2, 20
    restarts = 0
    methods = args.methods.split(",")
    functions = args.functions.split(",")
    batches = [int(b) for b in args.batches.split(",")]
    for fname in functions:
        if fname not in FUNCTIONS:
            parser.error(f"unknown function {fname}")
    budgets = [b for b in (50, 100) if b <= args.trials] or [args.trials]
    sk_seeds = args.seeds if args.sklearn_seeds is None else min(args.sklearn_seeds, args.seeds)
    tasks = [(m, fname, args.trials, batch, seed, args.driver, restarts, args.options)
             for m in methods for fname in functions for batch in batches
             for seed in range(sk_seeds if m == "sklearn-gp-ei" else args.seeds)]
    # The slowest tasks first, so the pool's tail is short.
    tasks.sort(key=lambda t: (t[0] != "sklearn-gp-ei", t[1] != "hartmann6", t[3]))
    wall = time.time()
    results, cpu = {}, {}
    with cf.ProcessPoolExecutor(max_workers=args.workers) as pool:
        for task, values, seconds in pool.map(run_task, tasks):
            method, fname, _, batch, seed, _, _, _ = task
            results.setdefault((method, fname, batch), {})[seed] = values
            cpu[(method, fname, batch)] = cpu.get((method, fname, batch), 0.0) + seconds
    wall = time.time() - wall

    print(f"# tuner benchmark: {args.seeds} seeds, {args.trials} trials, "
          f"wall {wall:.0f} s with {args.workers} workers")
    print(f"{'function':10} {'trials':>6} {'mode':5} {'method':14} {'q1':>10} {'median':>10} "
          f"{'q3':>10} {'<=0.1':>7} {'cpu s/run':>9}")
    summary = {}
    for fname in functions:
        fmin = FUNCTIONS[fname][2]
        for budget in budgets:
            for batch in batches:
                for method in methods:
                    runs = results.get((method, fname, batch), {})
                    regrets = [min(v[:budget]) - fmin for v in runs.values()]
                    q1, med, q3 = quartiles(regrets)
                    hits = sum(r <= 0.1 for r in regrets)
                    summary[(fname, budget, batch, method)] = (med, hits, len(regrets))
                    mode = "seq" if batch == 1 else f"par{batch}"
                    print(f"{fname:10} {budget:6d} {mode:5} {method:14} {q1:10.2e} {med:10.2e} "
                          f"{q3:10.2e} {hits:3d}/{len(regrets):<3d} "
                          f"{cpu[(method, fname, batch)] / len(regrets):9.2f}")

    if "kubetrain" in methods and 1 in batches and 4 in batches:
        print("# kubetrain parallel (4 per batch) vs sequential median regret")
        for fname in functions:
            for budget in budgets:
                seq = summary[(fname, budget, 1, "kubetrain")][0]
                par = summary[(fname, budget, 4, "kubetrain")][0]
                ratio = par / seq if seq > 0 else float("inf")
                print(f"{fname:10} {budget:4d} trials: seq {seq:.2e} par4 {par:.2e} "
                      f"ratio {ratio:.2f} ({'ok' if ratio <= 2 else 'MISS'} <= 2)")
        # The medians of two heavy-tailed samples move a lot between seed sets;
        # the same seed run both ways is the sharper comparison.
        print("# kubetrain parallel (4 per batch) vs sequential, seed by seed (same seed both ways)")
        for fname in functions:
            fmin = FUNCTIONS[fname][2]
            for budget in budgets:
                seq_runs = results[("kubetrain", fname, 1)]
                par_runs = results[("kubetrain", fname, 4)]
                ratios = [(min(par_runs[s][:budget]) - fmin) / max(min(seq_runs[s][:budget]) - fmin,
                                                                  1e-300)
                          for s in sorted(seq_runs) if s in par_runs]
                better = sum(r < 1 for r in ratios)
                worse = sum(r > 1 for r in ratios)
                print(f"{fname:10} {budget:4d} trials: par4 better on {better}, worse on {worse} "
                      f"of {len(ratios)} seeds (sign test p = {sign_test(better, worse):.2f}); "
                      f"median per-seed ratio {statistics.median(ratios):.2f}")
    if "kubetrain" in methods and 1 in batches:
        print("# kubetrain targets (sequential)")
        checks = [("branin", 50, 1e-4), ("hartmann6", 50, 1e-2), ("hartmann6", 100, 1e-3)]
        for fname, budget, target in checks:
            if budget in budgets and fname in functions:
                med = summary[(fname, budget, 1, "kubetrain")][0]
                print(f"{fname} median regret at {budget}: {med:.2e} "
                      f"({'ok' if med <= target else 'MISS'} <= {target:g})")
        if 100 in budgets and "hartmann6" in functions:
            _, hits, n = summary[("hartmann6", 100, 1, "kubetrain")]
            need = math.ceil(0.95 * n)
            print(f"hartmann6 seeds with regret <= 0.1 at 100: {hits}/{n} "
                  f"({'ok' if hits >= need else 'MISS'} >= {need}/{n})")

    if "kubetrain" in methods and not args.no_latency:
        print("# kubetrain suggestion latency, 6-D (hartmann6), uniformly random history")
        completed = [100, 1000]
        config = {"mode": "latency", "function": "hartmann6", "completed": completed,
                  "repeats": 2 if args.quick else 5, "batch": 1}
        if args.options:
            config["options"] = args.options
        out = subprocess.run([args.driver], input=json.dumps(config), capture_output=True,
                             text=True, check=True)
        for row, limit in zip(json.loads(out.stdout)["latency"], (50, 500)):
            print(f"completed {row['completed']:5d}: median {row['median_ms_per_suggestion']:.1f} ms "
                  f"wall, {row['median_cpu_ms_per_suggestion']:.1f} ms cpu per suggestion "
                  f"(max {row['max_ms']:.1f} ms) ({'ok' if row['median_ms_per_suggestion'] <= limit else 'MISS'} <= {limit} ms)")

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({f"{m}/{f}/{b}": v for (m, f, b), v in results.items()}, fh)


if __name__ == "__main__":
    sys.exit(main())
