#!/usr/bin/python3
"""Sweeps on real training: kubetrain's tuner and stopping rules against Optuna.

The built-in MLP (kubetrain-runtime train) on Fashion-MNIST, 4 hyperparameters:
learning rate 1e-4..1e-1 (log), hidden1 and hidden2 16..512 (log), batch size
32..512 (log). Each trial trains at most 8 epochs with an evaluation after
each (one report per epoch); a study spends at most 64 epochs in all, 2 trials
at a time. This script is the scheduler for every method alike: it starts a
trial in each free slot, reads its evaluations as they come, asks the method
whether to stop it (the process is killed at once), and ends the study when
64 epochs have been trained (trials still running then are killed).

Methods:
  kubetrain-median    Bayesian optimisation + the median rule (enableTrialEarlyStopping)
  kubetrain-halving   Bayesian optimisation on rung values (BOHB) + asynchronous
                      successive halving (earlyStopping SUCCESSIVE_HALVING, reports,
                      minResource 1, reductionFactor 3)
  kubetrain-halving-every-rung  the same with the model fitted to every rung value,
                      each at its resource level (HalvingModel::kEveryRung)
  kubetrain-pausing   the same with earlyStopping.pauseAtRungs, as the operator runs
                      it: a trial that reaches a rung below 8 epochs goes on if it
                      has earned the next one (tuner::NextPromotion with it alone
                      paused), else it pauses (its process ends after a checkpoint)
                      and the slot first resumes the paused trial NextPromotion
                      picks, from its checkpoint, else starts a new trial.
  random              kubetrain's random search, no stopping
  optuna-hyperband    Optuna TPE + HyperbandPruner(1, 8, 3)
  optuna-median       Optuna TPE + MedianPruner()
kubetrain's methods run its real tuner code through bench_tuner_session; Optuna's
through study.ask / trial.report / should_prune / study.tell.

Reported per method, over the seeds: the best test accuracy of a trial that
trained all 8 epochs, after 16, 32, 48 and 64 epochs spent (median and
quartiles), and the epochs each needed to reach optuna-hyperband's final best
(median over seeds).

  /usr/bin/python3 bench/tuner/real_training.py --build build --seeds 5 --json out.json
  ... --methods kubetrain-halving,optuna-hyperband --seeds 1   (iterating)
  ... --options '{"explore_every": 0}'   (kubetrain with BayesianOptions overrides)
  ... --first-seed 6 --min-resource 2 --reduction-factor 2   (other seeds, other rungs)
  ... --report a.json b.json   (the summary of earlier runs, their seeds pooled)
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 8
BUDGET = 64
WORKERS = 2
EVAL_LINE = re.compile(r"^Eval, step (\d+): loss: ([-+0-9.eEnainf]+), accuracy: ([-+0-9.eEnainf]+)")

PARAMS = [
    {"parameterName": "learning_rate", "type": "DOUBLE", "minValue": 1e-4, "maxValue": 1e-1,
     "scaleType": "UNIT_LOG_SCALE"},
    {"parameterName": "hidden1", "type": "INTEGER", "minValue": 16, "maxValue": 512,
     "scaleType": "UNIT_LOG_SCALE"},
    {"parameterName": "hidden2", "type": "INTEGER", "minValue": 16, "maxValue": 512,
     "scaleType": "UNIT_LOG_SCALE"},
    {"parameterName": "batch_size", "type": "INTEGER", "minValue": 32, "maxValue": 512,
     "scaleType": "UNIT_LOG_SCALE"},
]
METHODS = ["kubetrain-halving", "kubetrain-median", "random", "optuna-hyperband", "optuna-median",
           "kubetrain-pausing", "kubetrain-halving-every-rung"]


class Trial:
    def __init__(self, number, params):
        self.number = number
        self.params = params  # name -> string value, as passed to the trainer
        self.reports = []     # accuracy after each epoch
        self.steps = []
        self.state = "running"  # running, completed, stopped, killed, failed
        self.rungs = []
        self.optuna = None

    def record(self):
        status = {"running": "running", "completed": "completed", "stopped": "stopped"}.get(
            self.state, "failed")
        return {"id": str(self.number), "assignment": self.params, "status": status,
                "objective": self.reports[-1] if self.reports else None,
                # Epochs as the step: the resource successive halving counts.
                "curve": [[i + 1, v] for i, v in enumerate(self.reports)],
                "rungs": self.rungs}


class Session:
    """bench_tuner_session: kubetrain's tuner code, one request per line."""

    def __init__(self, binary):
        self.proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True)

    def ask(self, request):
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = json.loads(self.proc.stdout.readline())
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


class KubetrainMethod:
    def __init__(self, session, seed, rule, algorithm=None, options=None, min_resource=1,
                 reduction_factor=3):
        self.session, self.seed, self.rule, self.options = session, seed, rule, options
        self.spec = {"goal": "MAXIMIZE", "params": PARAMS}
        self.paused = set()  # ids of the trials paused at their last rung
        if algorithm:
            self.spec["algorithm"] = algorithm
        if rule in ("halving", "pausing"):
            self.spec["earlyStopping"] = {"algorithm": "SUCCESSIVE_HALVING", "resource": "REPORTS",
                                          "minResource": min_resource,
                                          "reductionFactor": reduction_factor}

    def suggest(self, trials, number):
        history = [t.record() for t in trials]
        request = {"op": "suggest", "spec": self.spec, "seed": self.seed, "history": history,
                   "count": 1}
        if self.options:
            request["options"] = self.options
        answer = self.session.ask(request)
        return Trial(number, answer["assignments"][0])

    def next_job(self, trials, number, arrived=None):
        """(trial, epochs to train it to, whether it is new). `arrived`: the
        trial whose segment just ended at a rung (paused), whose slot this is."""
        if self.rule == "pausing":
            # As the operator: a trial at its new rung goes on if it has earned
            # the next one, before any other paused trial is considered.
            answer = None
            if arrived is not None:
                answer = self.session.ask({"op": "promote", "spec": self.spec,
                                           "trials": [t.record() for t in trials],
                                           "paused": [str(arrived.number)]})
            if answer is None or answer["trial"] is None:
                answer = self.session.ask({"op": "promote", "spec": self.spec,
                                           "trials": [t.record() for t in trials],
                                           "paused": sorted(self.paused)})
            # The next rung's epoch, or the end where it is past it.
            target = min(EPOCHS, answer["resource"])
            if answer["trial"] is not None:
                trial = next(t for t in trials if str(t.number) == answer["trial"])
                self.paused.discard(answer["trial"])
                trial.state = "running"
                return trial, target, False
            return self.suggest(trials, number), target, True
        return self.suggest(trials, number), EPOCHS, True

    def judge(self, trial, trials):
        """Records the rungs `trial` reached since the last call; True where
        JudgeAtRungs would stop it."""
        others = [t.record() for t in trials if t is not trial]
        answer = self.session.ask({"op": "judge", "spec": self.spec, "running": trial.record(),
                                   "others": others})
        trial.rungs.extend(v for _, v in answer["reached"])
        return answer["stop"]

    def pause(self, trial, trials):
        """`trial` trained to a rung below the end: it waits there, its rung value
        recorded, as stopped (not pending) for the model until it is promoted."""
        self.judge(trial, trials)
        trial.state = "stopped"
        self.paused.add(str(trial.number))

    def should_stop(self, trial, trials):
        if self.rule == "halving":
            return self.judge(trial, trials)
        if self.rule == "median":
            completed = [t.record() for t in trials if t.state == "completed"]
            return bool(completed) and self.session.ask(
                {"op": "median", "spec": self.spec, "running": trial.record(),
                 "completed": completed})["stop"]
        return False

    def finished(self, trial):
        pass


class OptunaMethod:
    def __init__(self, seed, pruner_name):
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.optuna = optuna
        pruner = (optuna.pruners.HyperbandPruner(min_resource=1, max_resource=EPOCHS,
                                                 reduction_factor=3)
                  if pruner_name == "hyperband" else optuna.pruners.MedianPruner())
        self.study = optuna.create_study(direction="maximize",
                                         sampler=optuna.samplers.TPESampler(seed=seed),
                                         pruner=pruner)
        d = optuna.distributions
        self.distributions = {
            "learning_rate": d.FloatDistribution(1e-4, 1e-1, log=True),
            "hidden1": d.IntDistribution(16, 512, log=True),
            "hidden2": d.IntDistribution(16, 512, log=True),
            "batch_size": d.IntDistribution(32, 512, log=True),
        }

    def next_job(self, trials, number, arrived=None):
        return self.suggest(trials, number), EPOCHS, True

    def suggest(self, trials, number):
        ot = self.study.ask(self.distributions)
        trial = Trial(number, {k: repr(v) if isinstance(v, float) else str(v)
                               for k, v in ot.params.items()})
        trial.optuna = ot
        return trial

    def should_stop(self, trial, trials):
        trial.optuna.report(trial.reports[-1], len(trial.reports))
        return trial.optuna.should_prune()

    def finished(self, trial):
        state = self.optuna.trial.TrialState
        if trial.state == "completed":
            self.study.tell(trial.optuna, trial.reports[-1])
        elif trial.state == "stopped":
            self.study.tell(trial.optuna, state=state.PRUNED)
        else:
            self.study.tell(trial.optuna, state=state.FAIL)


def run_study(method, runtime, seed, workdir):
    """One study: returns the events [(epochs spent, best 8-epoch accuracy)]
    and the trials."""
    lock = threading.Lock()
    trials, events = [], []
    spent = [0]
    procs = {}

    def best_complete():
        done = [t.reports[-1] for t in trials if t.state == "completed"]
        return max(done) if done else None

    def worker():
        arrived = None  # the trial this slot just paused at a rung
        while True:
            with lock:
                if spent[0] >= BUDGET:
                    return
                trial, target, new = method.next_job(trials, len(trials) + 1, arrived)
                arrived = None
                if new:
                    trials.append(trial)
            out = os.path.join(workdir, f"t{trial.number}")
            args = [runtime, "train", f"--train_data_paths={DATA}/train-images-idx3-ubyte.gz",
                    f"--eval_data_paths={DATA}/t10k-images-idx3-ubyte.gz",
                    f"--output_path={out}", f"--num_epochs={target}", "--eval_every_epochs=1",
                    "--threads=1", "--save_checkpoints_secs=100000", "--log_every_steps=100000",
                    f"--seed={1000 * seed + trial.number}"]
            args += [f"--{k}={v}" for k, v in trial.params.items()]
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    text=True)
            with lock:
                procs[trial.number] = proc
            for line in proc.stdout:
                m = EVAL_LINE.match(line)
                if not m:
                    continue
                step, accuracy = int(m.group(1)), float(m.group(3))
                with lock:
                    if trial.state != "running" or step in trial.steps:
                        continue
                    if not math.isfinite(accuracy):
                        accuracy = 0.0
                    trial.steps.append(step)
                    trial.reports.append(accuracy)
                    spent[0] += 1
                    if len(trial.reports) >= EPOCHS:
                        trial.state = "completed"
                    elif spent[0] >= BUDGET:
                        trial.state = "killed"
                    elif method.should_stop(trial, trials):
                        trial.state = "stopped"
                    if trial.state != "running":
                        proc.kill()
                    if spent[0] >= BUDGET:
                        for other in trials:
                            if other.state == "running":
                                other.state = "killed"
                                procs[other.number].kill()
                    events.append((spent[0], best_complete()))
            proc.wait()
            with lock:
                if trial.state == "running" and target < EPOCHS and len(trial.reports) >= target:
                    method.pause(trial, trials)
                    arrived = trial
                    continue  # its checkpoint stays for the promotion
                if trial.state == "running":
                    trial.state = "completed" if len(trial.reports) >= EPOCHS else "failed"
                method.finished(trial)
            shutil.rmtree(out, ignore_errors=True)

    threads = [threading.Thread(target=worker) for _ in range(WORKERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return events, trials


def best_at(events, epochs):
    best = None
    for spent, b in events:
        if spent <= epochs and b is not None:
            best = b
    return best


def epochs_to_reach(events, target):
    for spent, b in events:
        if b is not None and b >= target - 1e-12:
            return spent
    return None


def quartiles(xs):
    xs = sorted(xs)
    if not xs:
        return (None, None, None)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) > 1 else [xs[0]] * 3
    return (q[0], statistics.median(xs), q[2])


def fmt(x, digits=4):
    return "-" if x is None else f"{x:.{digits}f}"


def report(results):
    """Prints the summary of `results` ({method: [study, ...]}, as --json writes)."""
    seeds = sorted({r["seed"] for studies in results.values() for r in studies})
    print(f"\n{len(seeds)} seeds: {seeds}")
    print(f"\nBest accuracy of a trial that trained {EPOCHS} epochs, by epochs spent "
          "(median [quartiles] over seeds)")
    checkpoints = [BUDGET // 4, BUDGET // 2, 3 * BUDGET // 4, BUDGET]
    print(f"{'method':20s}" + "".join(f"{c:>26d}" for c in checkpoints))
    for name in results:
        row = f"{name:20s}"
        for c in checkpoints:
            q1, med, q3 = quartiles([b for b in (best_at(r["events"], c) for r in results[name])
                                     if b is not None])
            got = sum(best_at(r["events"], c) is not None for r in results[name])
            row += f"{fmt(med):>10s} [{fmt(q1)}, {fmt(q3)}]" + (
                f"({got})" if got < len(results[name]) else "")
        print(row)
    if "optuna-hyperband" in results and results["optuna-hyperband"]:
        finals = [best_at(r["events"], BUDGET) for r in results["optuna-hyperband"]]
        finals = [f for f in finals if f is not None]
        if finals:
            target = statistics.median(finals)
            print(f"\nEpochs to reach optuna-hyperband's final best ({target:.4f}; median over "
                  "seeds; '-' where a seed never did)")
            for name in results:
                need = [epochs_to_reach(r["events"], target) for r in results[name]]
                # A seed that never reached it counts as needing more than the budget.
                med = statistics.median(math.inf if n is None else n for n in need)
                print(f"{name:20s} median {'-' if math.isinf(med) else f'{med:.1f}'}"
                      f"  per seed {['-' if n is None else n for n in need]}")


def main():
    global EPOCHS, BUDGET
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build", help="the CMake build folder")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--json", help="write every study's events and trials here")
    parser.add_argument("--min-resource", type=int, default=1,
                        help="kubetrain-halving's and kubetrain-pausing's minResource (reports)")
    parser.add_argument("--reduction-factor", type=int, default=3,
                        help="kubetrain-halving's and kubetrain-pausing's reductionFactor")
    parser.add_argument("--options", type=json.loads, default=None,
                        help="BayesianOptions overrides for kubetrain's methods (JSON)")
    parser.add_argument("--epochs", type=int, default=EPOCHS,
                        help="epochs per trial (smaller: a smoke test only)")
    parser.add_argument("--budget", type=int, default=BUDGET,
                        help="epochs per study (smaller: a smoke test only)")
    parser.add_argument("--report", nargs="+", metavar="JSON",
                        help="print the summary of earlier runs' --json files together "
                             "(their seeds pooled) and train nothing")
    args = parser.parse_args()
    EPOCHS, BUDGET = args.epochs, args.budget
    if args.report:
        pooled = {}
        for path in args.report:
            with open(path) as f:
                for name, studies in json.load(f).items():
                    pooled.setdefault(name, []).extend(studies)
        report(pooled)
        return
    runtime = os.path.join(args.build, "trainer-runtime/cmd/kubetrain-runtime")
    session_binary = os.path.join(args.build, "bench/tuner/bench_tuner_session")
    for path in (runtime, session_binary):
        if not os.access(path, os.X_OK):
            sys.exit(f"real_training: {path} not found: build the targets kubetrain-runtime and "
                     "bench_tuner_session first")
    methods = args.methods.split(",")
    if any(m.startswith("optuna") for m in methods):
        try:
            import optuna  # noqa: F401
        except ImportError:
            sys.exit("real_training: Optuna is missing: apt-get install python3-optuna")
    results = {m: [] for m in methods}
    # Seed-major: a partial run still has every method on the same seeds.
    for seed in range(args.first_seed, args.first_seed + args.seeds):
        for name in methods:
            session = Session(session_binary) if name.startswith("kubetrain") or name == "random" \
                else None
            if name in ("kubetrain-halving", "kubetrain-pausing", "kubetrain-halving-every-rung"):
                options = args.options
                if name == "kubetrain-halving-every-rung":
                    options = dict(options or {}, halving_model="every_rung")
                method = KubetrainMethod(session, seed, name.split("-")[1], options=options,
                                         min_resource=args.min_resource,
                                         reduction_factor=args.reduction_factor)
            elif name == "kubetrain-median":
                method = KubetrainMethod(session, seed, "median", options=args.options)
            elif name == "random":
                method = KubetrainMethod(session, seed, "none", algorithm="RANDOM_SEARCH")
            elif name == "optuna-hyperband":
                method = OptunaMethod(seed, "hyperband")
            elif name == "optuna-median":
                method = OptunaMethod(seed, "median")
            else:
                sys.exit(f"real_training: unknown method {name} (one of {', '.join(METHODS)})")
            workdir = tempfile.mkdtemp(prefix="kubetrain-real-bench-")
            start = time.time()
            events, trials = run_study(method, runtime, seed, workdir)
            shutil.rmtree(workdir, ignore_errors=True)
            if session:
                session.close()
            stopped = sum(t.state == "stopped" for t in trials)
            full = sum(t.state == "completed" for t in trials)
            print(f"seed {seed} {name}: {len(trials)} trials ({full} trained {EPOCHS} epochs, {stopped} "
                  f"stopped), best {fmt(best_at(events, BUDGET))} after {BUDGET} epochs, "
                  f"{time.time() - start:.0f} s", flush=True)
            results[name].append({"seed": seed, "events": events,
                                  "trials": [{"params": t.params, "reports": t.reports,
                                              "state": t.state, "rungs": t.rungs}
                                             for t in trials]})
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(results, f)

    report(results)


if __name__ == "__main__":
    main()
