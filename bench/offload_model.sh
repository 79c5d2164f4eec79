#!/usr/bin/env bash
# OffloadModel benchmark (issue 15): `zt bench step` plainly and with --offload-model disk at
# --offload-slices 4 and 14, --offload-resident 2, in both modes (recompute: the seed's, forward
# twice; keep-graph), for GPT-2 124M at B=8, T=256 (each run its
# own process: peak RSS is per process; the runs alternate plain / offload so a busy machine
# hurts both alike). One JSON line per run to bench/results/offload_model.jsonl, then a JSON
# summary per offload run: step time, peak RSS and RAM PARAM+GRAD (the peak of the two together,
# from zerotrain's accounting) as ratios to the plain run before it. Targets at 14 slices:
# step <= 1.15x plain, RAM PARAM+GRAD <= 0.45x plain.
# usage: bench/offload_model.sh [build dir (default build)] [--quick: gpt2-tiny, T=64, for a check]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
zt="$build/zt"
out=bench/results/offload_model.jsonl
[ -x "$zt" ] || { echo "bench/offload_model.sh: $zt not found; run make first" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench/offload_model.sh: needs python3 for the summary" >&2; exit 2; }
if [ "${2:-}" = "--quick" ]; then
  out=${TMPDIR:-/tmp}/zt_offload_model_quick.jsonl
  cfg="--model gpt2-tiny --batch 8 --seq 64 --steps 3"
  slices=(2 6)
else
  cfg="--model gpt2-124m --batch 8 --seq 256 --steps 3"
  slices=(4 14)
fi
dir=${ZT_OFFLOAD_DIR:-${TMPDIR:-/tmp}}
: > "$out"
for n in "${slices[@]}"; do
  for mode in recompute keep-graph; do
    # shellcheck disable=SC2086
    "$zt" bench step $cfg --warmup-steps 1 | tee -a "$out"
    # shellcheck disable=SC2086
    "$zt" bench step $cfg --warmup-steps 1 --offload-model disk --offload-dir "$dir" --offload-slices "$n" \
      --offload-resident 2 --offload-mode "$mode" | tee -a "$out"
  done
done
python3 - "$out" <<'PY'
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
plain = None
for r in runs:
    if r["offload_model"] == "none":
        plain = r
        continue
    print(json.dumps({
        "summary": "offload_model", "model": r["model"], "batch": r["batch"], "seq": r["seq"],
        "slices": r["offload_slices"], "resident": r["offload_resident"], "mode": r.get("offload_mode"),
        "step_ms": r["ms_per_step"], "plain_step_ms": plain["ms_per_step"],
        "step_ratio": round(r["ms_per_step"] / plain["ms_per_step"], 3),
        "ram_param_grad": r["peak_param_grad"], "plain_ram_param_grad": plain["peak_param_grad"],
        "ram_param_grad_ratio": round(r["peak_param_grad"] / plain["peak_param_grad"], 3),
        "peak_rss_ratio": round(r["peak_rss_bytes"] / plain["peak_rss_bytes"], 3),
        "disk_peak": r["store_device_peak"], "slice_loads": r["slice_loads"], "prefetched": r["slice_prefetched"]}))
PY
echo "bench/offload_model.sh: results in $out" >&2
