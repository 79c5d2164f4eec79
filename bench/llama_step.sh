#!/usr/bin/env bash
# The Llama training step (SmolLM-135M's shape, B=4, T=256, 2 threads, fp32) of zerotrain
# (build/bench/bench_llama_step) against transformers' LlamaForCausalLM on PyTorch, eager and
# under torch.compile (bench/llama_torch_step.py), alternated back to back ROUNDS times (the
# order rotating each round) so that all three see the same machine; then the medians over the
# rounds, the ratios and the targets (zerotrain >= 1.2x compile's tokens/s, model GFLOP/s >= 0.85
# of sgemm at (B*T) x 576 x 1536 measured in the same run). Every run's line and the summary are
# printed and appended to bench/results/llama_step.jsonl, with the load average before each run.
# Usage: [PYTHON=python-with-torch-and-transformers] bench/llama_step.sh [ROUNDS (5)] [options
# for both programs: --steps N --warmup N --threads N --batch B --seq T --layers L]
# ZT_BENCH: the zerotrain program (build/bench/bench_llama_step); OUT: the results file.
# Example: PYTHON=/tmp/llamafxenv/bin/python bench/llama_step.sh 5 --steps 3
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-5}
shift $(($# < 1 ? $# : 1))
opts=("$@")
py=${PYTHON:-python3}
zt=${ZT_BENCH:-build/bench/bench_llama_step}
out=${OUT:-bench/results/llama_step.jsonl}
[ -x "$zt" ] || { echo "llama_step.sh: $zt is missing: build first (cmake --build build)" >&2; exit 2; }
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
impls=(zerotrain eager compile)
load() { cut -d' ' -f1 /proc/loadavg; }

run_one() { # impl round: one run, its JSON line wrapped with the round and the load before it
  local l
  l=$(load)
  local line
  case $1 in
    zerotrain) line=$("$zt" "${opts[@]}" | tail -n 1) ;;
    *) line=$("$py" bench/llama_torch_step.py --mode "$1" "${opts[@]}" 2>/dev/null | tail -n 1) ;;
  esac
  [ -n "$line" ] || { echo "llama_step.sh: the $1 run printed nothing (rerun it alone to see its errors)" >&2; exit 1; }
  echo "{\"round\":$2,\"load1_before\":$l,\"run\":$line}" | tee -a "$runs"
}

for r in $(seq "$rounds"); do
  for k in 0 1 2; do run_one "${impls[$(((r - 1 + k) % 3))]}" "$r"; done
done
cat "$runs" >>"$out"
python3 - "$runs" "$(nproc)" "$(uptime)" <<'PY' | tee -a "$out"
import json, statistics as st, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in rows:
    by.setdefault(r["run"]["impl"], []).append(r["run"])
med = lambda impl, key: st.median(x[key] for x in by[impl])
zt, eager, comp = "zerotrain", "torch-eager", "torch-compile"
s = {"bench": "llama_step_summary", "rounds": len(by[zt]), "layers": by[zt][0]["layers"],
     "batch": by[zt][0]["batch"], "seq": by[zt][0]["seq"], "threads": by[zt][0]["threads"],
     "steps": by[zt][0]["steps"], "cores": int(sys.argv[2]),
     "load1_before_runs": [r["load1_before"] for r in rows], "uptime_after": sys.argv[3].strip()}
for impl in (zt, eager, comp):
    s[impl] = {k: med(impl, k) for k in ("tokens_per_s", "ms_per_step", "ms_best", "fwd_ms", "bwd_ms", "optim_ms",
                                         "model_gflops", "sgemm_gflops", "ratio_to_sgemm")}
    # each run's best step: what the machine gives between other processes' bursts
    s[impl]["tokens_per_s_best"] = round(s["batch"] * s["seq"] / s[impl]["ms_best"] * 1e3, 1)
s["zt_over_compile"] = round(s[zt]["tokens_per_s"] / s[comp]["tokens_per_s"], 3)
s["zt_over_compile_best"] = round(s[comp]["ms_best"] / s[zt]["ms_best"], 3)
s["zt_over_eager"] = round(s[zt]["tokens_per_s"] / s[eager]["tokens_per_s"], 3)
s["zt_ratio_to_sgemm"] = s[zt]["ratio_to_sgemm"]  # the median of each run's own ratio
s["target_compile_1.2x_met"] = s["zt_over_compile"] >= 1.2
s["target_sgemm_0.85_met"] = s["zt_ratio_to_sgemm"] >= 0.85
print(json.dumps(s))
PY
