#!/usr/bin/env bash
# Data-parallel benchmark (issue 5): `zt bench dp` under mpirun for GPT-2 124M and 350M at
# 1, 2 and 4 ranks (oversubscribed on small machines: ranks share the cores, one OpenMP
# thread each), DDP and the FSDP strategies. One JSON line per run to bench/results/dp.jsonl
# with, per rank, peak PARAM+GRAD+OPTIM bytes against the ZeRO formula, bytes sent per step
# against the traffic formula, and the overlap fraction (see cli/bench_dp.c). 350M DDP at 4
# ranks is left out: 4 x 16 x 355M bytes does not fit a 24 GiB machine. A fourth field turns
# FSDP prefetch off (a unit gathered at a time: less memory, less overlap).
# usage: bench/dp.sh [build dir (default build)] [--quick: gpt2-tiny, 2 ranks]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
zt="$build/zt"
[ -x "$zt" ] || { echo "bench/dp.sh: $zt not found; run make first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench/dp.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
out=bench/results/dp.jsonl
if [ "${2:-}" = "--quick" ]; then
  out=${TMPDIR:-/tmp}/zt_dp_quick.jsonl
  runs=("2 gpt2-tiny none" "2 gpt2-tiny full")
  shape="--batch 4 --seq 64 --steps 3"
else
  runs=("1 gpt2-124m none" "2 gpt2-124m none" "2 gpt2-124m full" "2 gpt2-124m full off" "2 gpt2-124m grad_op"
        "2 gpt2-124m opt" "2 gpt2-124m hybrid:1" "4 gpt2-124m none" "4 gpt2-124m full" "4 gpt2-124m full off"
        "1 gpt2-350m none" "2 gpt2-350m none" "2 gpt2-350m full" "4 gpt2-350m full" "4 gpt2-350m full off")
  shape="--batch 4 --seq 128 --steps 3"
fi
: > "$out"
cores=$(nproc)
for r in "${runs[@]}"; do
  read -r np model mode prefetch <<<"$r"
  threads=$(( cores / np )); [ "$threads" -ge 1 ] || threads=1
  # shellcheck disable=SC2086
  OMP_NUM_THREADS=$threads mpirun -np "$np" --oversubscribe "$zt" bench dp --model "$model" --shard "$mode" \
    --threads "$threads" --prefetch "${prefetch:-on}" $shape --warmup-steps 1 | tee -a "$out"
done
echo "bench/dp.sh: results in $out" >&2
