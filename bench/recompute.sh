#!/usr/bin/env bash
# Activation recomputation benchmark (issue 4): `zt bench step` under --recompute none,
# full, selective and budget=SIZE (SIZE = half of none's measured activation peak) for
# GPT-2 124M at B=4, T=256 and T=1024 and a deep narrow model (48 layers, width 384).
# Each run is its own process (peak RSS is per process). Writes one JSON line per run to
# bench/results/recompute.jsonl, then `zt plot --recompute` prints the ratios against
# none (time, activation peak, budget accuracy) as JSON and draws memory vs time
# overhead to bench/results/recompute.svg.
# usage: bench/recompute.sh [build dir (default build)] [--quick: gpt2-tiny only, for CI-like checks]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
zt="$build/zt"
out=bench/results/recompute.jsonl
[ -x "$zt" ] || { echo "bench/recompute.sh: $zt not found; run make first" >&2; exit 2; }
if [ "${2:-}" = "--quick" ]; then
  out=${TMPDIR:-/tmp}/zt_recompute_quick.jsonl
  configs=("--model gpt2-tiny --batch 4 --seq 128 --steps 3")
else
  configs=("--model gpt2-124m --batch 4 --seq 256 --steps 5"
           "--model gpt2-124m --batch 4 --seq 1024 --steps 3"
           "--model gpt2-124m --layers 48 --dim 384 --heads 6 --batch 4 --seq 256 --steps 5")
fi
: > "$out"
for cfg in "${configs[@]}"; do
  # shellcheck disable=SC2086
  none=$("$zt" bench step $cfg --warmup-steps 1 --recompute none)
  echo "$none" | tee -a "$out"
  act=$(sed 's/.*"ACTIVATION":\([0-9]*\).*/\1/' <<<"$none")
  for mode in full selective "budget=$((act / 2))"; do
    # shellcheck disable=SC2086
    "$zt" bench step $cfg --warmup-steps 1 --recompute "$mode" | tee -a "$out"
  done
done
svg=${out%.jsonl}.svg
"$zt" plot --recompute "$out" --out "$svg"
echo "bench/recompute.sh: results in $out, plot in $svg" >&2
