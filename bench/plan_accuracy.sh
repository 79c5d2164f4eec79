#!/usr/bin/env bash
# The planner's error, published (issue 29): a grid of configurations (gpt2-124m, gpt2-350m and
# smollm-135m of the Llama family; 1, 2 and 4 ranks; plain, recompute, activation offload,
# OffloadModel with its optimizer state in RAM, states on disk inside a memory cgroup, DDP, FSDP's
# states on disk, FSDP full / grad_op / opt / hybrid, pipelines of several
# schedules, pipeline x FSDP) each run by zt train with --plan-report: the planner's prediction of
# the options as given (from a calibration zt plan measured at that model and world, the median of
# 5 runs a figure) beside what the run measured (the largest rank's peak RSS and accounted peak,
# the median step after the first). Then, per group of one model, world and limit, the planner's
# own choice (zt plan with the same calibration) is run if the grid lacks it, and its measured step
# set against the fastest measured configuration of the group that fit the limit.
# Results: bench/results/plan_accuracy.jsonl (a line per run, a line per group) and
# bench/results/plan_accuracy.md (the table, the targets and what missed them, by
# bench/plan_accuracy_table.py), and bench/results/plan_accuracy.svg (zt plot --plan).
# Run it on a quiet machine: step times are what it measures.
# usage: bench/plan_accuracy.sh [build dir (default build)] [--quick: gpt2-tiny shapes, a check of the script]
# env: ZT_BENCH_STEPS (steps a run, default 4), ZT_OFFLOAD_DIR (the disk tier's folder),
#      ZT_BENCH_ONLY="GROUP FLAGS..." (only the runs whose group and flags are these lines', exactly; their rows
#      appended to the results, and the table and plot made again: a configuration added later)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    *) build=$a ;;
  esac
done
zt=$PWD/$build/zt
[ -x "$zt" ] || { echo "$0: no $zt: build first (cmake --build $build)" >&2; exit 2; }
steps=${ZT_BENCH_STEPS:-4}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
odir=${ZT_OFFLOAD_DIR:-${TMPDIR:-/tmp}}
res=bench/results/plan_accuracy.jsonl
[ $quick = 1 ] && res=$w/plan_accuracy.jsonl
: >"$w/rows.jsonl"

# model shapes: name -> zt flags (the real vocabularies: the built-in data's bytes are ids below them)
declare -A shape
if [ $quick = 1 ]; then
  shape[gpt2-124m]="--layers 2 --dim 64 --heads 4 --batch 4 --seq 64"
  shape[gpt2-350m]="--layers 4 --dim 64 --heads 4 --batch 4 --seq 64"
  shape[smollm-135m]="--model llama-tiny --batch 4 --seq 64"
else
  shape[gpt2-124m]="--model gpt2-124m --vocab 50257 --batch 4 --seq 128"
  shape[gpt2-350m]="--model gpt2-350m --vocab 50257 --batch 4 --seq 128"
  shape[smollm-135m]="--model smollm-135m --vocab 49152 --batch 4 --seq 128"
fi

run_zt() { # ranks, then zt's arguments
  local n=$1
  shift
  if [ "$n" -gt 1 ]; then OMP_NUM_THREADS=1 mpirun -np "$n" --bind-to none "$zt" "$@" --threads 1; else "$zt" "$@" --threads 2; fi
}

calibrate() { # model ranks: $w/cal-MODEL-RANKS.json, measured once
  local f=$w/cal-$1-$2.json
  [ -f "$f" ] && return 0
  # shellcheck disable=SC2086
  run_zt "$2" plan ${shape[$1]} --reps 5 --save-calibration "$f" --offload-dir "$odir" >"$w/cal.log" 2>&1 ||
    { cat "$w/cal.log" >&2; return 1; }
}

# one configuration: model ranks limit(- for none) group flags...
measure() {
  local model=$1 n=$2 limit=$3 group=$4
  shift 4
  if [ -n "${ZT_BENCH_ONLY:-}" ] && ! grep -qxF -- "$group $*" <<<"$ZT_BENCH_ONLY"; then return 0; fi
  calibrate "$model" "$n"
  local rep=$w/report.json pre=()
  rm -f "$rep"
  [ "$limit" != - ] && pre=(bench/mem_limit.sh "$limit" --)
  local t0 rc=0
  t0=$(date +%s)
  # shellcheck disable=SC2086
  "${pre[@]}" bash -c "$(declare -f run_zt); zt='$zt'; run_zt $n train ${shape[$model]} --steps $steps --eval-every 1000 \
    --eval-batches 1 --sample-len 0 --offload-dir '$odir' --plan-calibration '$w/cal-$model-$n.json' --plan-report '$rep' $*" \
    >"$w/run.log" 2>"$w/run.err" || rc=$?
  local cg
  cg=$(sed -n 's/^{"mem_limit":{"limit":[0-9]*,"peak":\([0-9-]*\),.*/\1/p' "$w/run.err" | tail -1)
  python3 - "$rep" "$model" "$n" "$limit" "$group" "$*" "$rc" "${cg:-0}" "$(($(date +%s) - t0))" \
    "$(cut -d' ' -f1 /proc/loadavg)" >>"$w/rows.jsonl" <<'PY'
import json, os, sys
rep, model, n, limit, group, flags, rc, cg, secs, load = sys.argv[1:]
row = {"kind": "run", "model": model, "ranks": int(n), "limit": limit, "group": group, "flags": flags,
       "rc": int(rc), "cgroup_peak": int(cg), "wall_s": int(secs), "load": float(load)}
if os.path.exists(rep):
    r = json.load(open(rep))
    row.update(config=r["configuration"], predicted=r["predicted"], measured=r["measured"])
    p, m = r["predicted"], r["measured"]
    row["rss_err"] = (p["rss"] - m["rss"]) / m["rss"] if m["rss"] else None
    row["accounted_err"] = (p["accounted"] - m["accounted"]) / m["accounted"] if m["accounted"] else None
    row["step_err"] = (p["step_s"] - m["step_s"]) / m["step_s"] if m["step_s"] else None
print(json.dumps(row))
PY
  tail -1 "$w/rows.jsonl" | python3 -c "import json,sys; r=json.load(sys.stdin); print('%-12s %d %-5s %-44s rc %d rss %s step %s' % (r['model'], r['ranks'], r['limit'], r.get('config', r['flags'])[:44], r['rc'], r.get('rss_err'), r.get('step_err')))" >&2
  [ "$rc" -eq 0 ] || tail -3 "$w/run.err" >&2
  return 0
}

# the planner's choice for a group: its flags, run unless the grid ran them
choose() { # model ranks limit group
  local model=$1 n=$2 limit=$3 group=$4 lim=()
  [ -n "${ZT_BENCH_ONLY:-}" ] && return 0
  calibrate "$model" "$n"
  [ "$limit" != - ] && lim=(--mem-limit "$limit")
  # shellcheck disable=SC2086
  "$zt" plan ${shape[$model]} --ranks "$n" "${lim[@]}" --plan-calibration "$w/cal-$model-$n.json" --reps 0 \
    --out "$w/choice.json" --offload-dir "$odir" >/dev/null 2>&1 || { echo "no choice for $group" >&2; return 0; }
  local flags
  flags=$(python3 -c "import json; d=json.load(open('$w/choice.json')); e=d['entries'][d['chosen']]; print(' '.join('--%s %s' % kv for kv in e['options'].items()))")
  # states in the tier take the limit too: their cache and write-behind bounds (zt train --plan auto does the same)
  case "$flags" in *"--offload-states disk"*) [ "$limit" != - ] && flags="$flags --mem-limit $limit" ;; esac
  local name
  name=$(python3 -c "import json; d=json.load(open('$w/choice.json')); print(d['entries'][d['chosen']]['name'])")
  if ! python3 -c "import json,sys; sys.exit(0 if any(r.get('kind') == 'run' and r['group'] == sys.argv[1] and r.get('config') == sys.argv[2] for r in map(json.loads, open(sys.argv[3]))) else 1)" "$group" "$name" "$w/rows.jsonl"; then
    # shellcheck disable=SC2086
    measure "$model" "$n" "$limit" "$group" $flags
  fi
  python3 - "$w/choice.json" "$group" >>"$w/rows.jsonl" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); e = d["entries"][d["chosen"]]
print(json.dumps({"kind": "choice", "group": sys.argv[2], "config": e["name"], "predicted": e["predicted"],
                  "options": e["options"], "fitting": sum(x["fits"] for x in d["entries"]), "entries": len(d["entries"])}))
PY

}

G=gpt2-124m S=gpt2-350m L=smollm-135m
# 1 rank, gpt2-124m, no limit
measure $G 1 - g124-1 --recompute none
measure $G 1 - g124-1 --recompute full
measure $G 1 - g124-1 --recompute selective
measure $G 1 - g124-1 --offload-activations disk
measure $G 1 - g124-1 --microbatches 2
measure $G 1 - g124-1 --offload-model disk --offload-slices 4 --offload-resident 2 --offload-mode recompute
measure $G 1 - g124-1 --offload-model disk --offload-slices 6 --offload-resident 2 --offload-mode keep-graph --microbatches 2
choose $G 1 - g124-1
# 1 rank under a memory cgroup: states on disk (and what else fits)
measure $G 1 1200M g124-1-lim --offload-states disk --offload-slices 4 --offload-resident 2 --offload-mode keep-graph --mem-limit 1200M
measure $G 1 1200M g124-1-lim --offload-states disk --offload-slices 6 --offload-resident 2 --offload-mode recompute --mem-limit 1200M
choose $G 1 1200M g124-1-lim
# 2 ranks
measure $G 2 - g124-2 --shard none
measure $G 2 - g124-2 --shard full
measure $G 2 - g124-2 --shard grad_op
measure $G 2 - g124-2 --shard opt
measure $G 2 - g124-2 --shard full --offload-states disk
measure $G 2 - g124-2 --pp 2 --schedule 1f1b --microbatches 4
measure $G 2 - g124-2 --pp 2 --schedule zb-h1 --microbatches 4
choose $G 2 - g124-2
# 4 ranks
measure $G 4 - g124-4 --shard none
measure $G 4 - g124-4 --shard full --recompute full
measure $G 4 - g124-4 --shard hybrid:2
measure $G 4 - g124-4 --shard hybrid:2 --offload-states disk
measure $G 4 - g124-4 --pp 2 --schedule 1f1b --microbatches 2
measure $G 4 - g124-4 --pp 2 --schedule zb-h1 --microbatches 2 --shard full
measure $G 4 - g124-4 --pp 2 --schedule 1f1b --microbatches 2 --shard grad_op
measure $G 4 - g124-4 --pp 4 --schedule 1f1b --microbatches 4
choose $G 4 - g124-4
# gpt2-350m
measure $S 1 - g350-1 --recompute none
measure $S 1 - g350-1 --recompute full --offload-activations none
measure $S 1 - g350-1 --offload-model disk --offload-slices 8 --offload-resident 2 --offload-mode keep-graph
measure $S 2 - g350-2 --shard full
measure $S 2 - g350-2 --pp 2 --schedule interleaved --microbatches 4
choose $S 1 - g350-1
# the Llama family
measure $L 1 - l135-1 --recompute none
measure $L 1 - l135-1 --recompute selective
measure $L 2 - l135-2 --shard full
measure $L 2 - l135-2 --shard opt
measure $L 2 - l135-2 --shard full --offload-states disk
measure $L 2 - l135-2 --pp 2 --schedule zb-v --microbatches 4
measure $L 1 - l135-1 --offload-activations disk
measure $L 1 - l135-1 --offload-model disk --offload-slices 8 --offload-resident 2 --offload-mode recompute
measure $L 4 - l135-4 --shard hybrid:2
measure $L 4 - l135-4 --shard full
measure $L 1 1000M l135-1-lim --offload-states disk --offload-slices 16 --offload-resident 2 --offload-mode recompute --mem-limit 1000M
choose $L 1 1000M l135-1-lim
choose $L 2 - l135-2

if [ -n "${ZT_BENCH_ONLY:-}" ]; then cat "$w/rows.jsonl" >>"$res"; else cp "$w/rows.jsonl" "$res"; fi
python3 bench/plan_accuracy_table.py "$res" >"${res%.jsonl}.md"
"$zt" plot --plan "$res" --out "${res%.jsonl}.svg" || true
cat "${res%.jsonl}.md"
