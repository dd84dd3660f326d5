#!/bin/bash
# All-reduce bandwidth, 2 processes on this host, float32 buffers of 4 KiB,
# 256 KiB, 4 MiB and 64 MiB: kubetrain (gRPC and shared-memory transports),
# gloo (torch.distributed) and OpenMPI (MPI_Allreduce).
#
#   bench/allreduce/run.sh [build-dir] [rounds]
#
# Each implementation runs `rounds` times, the rounds interleaved so a burst
# of load on a shared machine hits all of them alike; the best round per size
# is reported. Needs: allreduce_bench built in build-dir, /usr/bin/python3
# with torch, mpicc and mpirun.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
rounds=${2:-3}
bench="$build/bench/allreduce/allreduce_bench"
[ -x "$bench" ] || { echo "missing $bench: build the allreduce_bench target" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.txt"
: > "$results"

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

run_kubetrain() {  # transport
  local transport=$1 extra=() group="kubetrain-bench-$$-$RANDOM"
  if [ "$transport" = grpc ]; then
    extra=("--addresses=127.0.0.1:$(free_port),127.0.0.1:$(free_port)")
  fi
  "$bench" --transport="$transport" --group="$group" --rank=1 --size=2 "${extra[@]}" > /dev/null &
  local peer=$!
  "$bench" --transport="$transport" --group="$group" --rank=0 --size=2 "${extra[@]}" | tee -a "$results"
  wait "$peer"
}

mpicc -O2 -o "$work/mpi_allreduce" "$here/mpi_allreduce.c"
mpirun_flags=()
[ "$(id -u)" = 0 ] && mpirun_flags+=(--allow-run-as-root)

for round in $(seq 1 "$rounds"); do
  echo "# round $round"
  run_kubetrain shm
  run_kubetrain grpc
  /usr/bin/python3 "$here/gloo_allreduce.py" "$(free_port)" | tee -a "$results"
  mpirun "${mpirun_flags[@]}" --oversubscribe -np 2 "$work/mpi_allreduce" | grep RESULT | tee -a "$results"
done

/usr/bin/python3 "$here/summarize.py" "$results"
