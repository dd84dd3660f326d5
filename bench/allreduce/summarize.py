"""Reads RESULT lines (impl bytes iters us_per_op busbw_GBps), keeps the best
round per implementation and size, prints the table and the target ratios."""
import sys
from collections import defaultdict

best = defaultdict(dict)  # impl -> bytes -> (us, busbw)
for line in open(sys.argv[1]):
    parts = line.split()
    if len(parts) != 6 or parts[0] != "RESULT":
        continue
    impl, nbytes, us, busbw = parts[1], int(parts[2]), float(parts[4]), float(parts[5])
    if nbytes not in best[impl] or us < best[impl][nbytes][0]:
        best[impl][nbytes] = (us, busbw)

impls = [i for i in ["kubetrain-shm", "kubetrain-grpc", "gloo", "openmpi"] if i in best]
sizes = sorted({b for i in impls for b in best[i]})


def human(n):
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB"


print()
print("all-reduce, 2 processes, float32; time per op (us) and bus bandwidth (GB/s), best round")
print(f"{'size':>8} " + " ".join(f"{i:>24}" for i in impls))
for n in sizes:
    cells = []
    for i in impls:
        us, bw = best[i].get(n, (float("nan"), float("nan")))
        cells.append(f"{us:>11.1f} us {bw:>7.3f} GB/s")
    print(f"{human(n):>8} " + " ".join(f"{c:>24}" for c in cells))

print()
print("best kubetrain transport vs peers (ratio of bus bandwidth; target in brackets)")
ok = True
for n in sizes:
    ours = [(best[i][n][1], i) for i in ("kubetrain-shm", "kubetrain-grpc") if n in best.get(i, {})]
    if not ours:
        continue
    bw, which = max(ours)
    line = f"{human(n):>8} {which:>15} {bw:7.3f} GB/s"
    if n in best.get("gloo", {}):
        r = bw / best["gloo"][n][1]
        target = 2.0 if n >= 256 << 10 else None
        line += f"   vs gloo {r:6.2f}x" + (f" [>= {target:.1f}x {'met' if r >= target else 'MISSED'}]" if target else "")
        ok &= target is None or r >= target
    if n in best.get("openmpi", {}):
        r = bw / best["openmpi"][n][1]
        target = 1.0 if n >= 4 << 20 else None
        line += f"   vs openmpi {r:6.2f}x" + (f" [>= {target:.1f}x {'met' if r >= target else 'MISSED'}]" if target else "")
        ok &= target is None or r >= target
    print(line)
print("targets:", "all met" if ok else "NOT all met")
