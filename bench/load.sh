#!/usr/bin/env bash
# Training beside other work (issue 25, item 8): `zt bench step` on an idle machine and beside
# one CPU-bound process (a shell busy loop), for each way the OpenMP threads may wait: zt's
# default, libgomp's own default (GOMP_SPINCOUNT=300000: what zt did before it set its own),
# passive waiting and one thread; then GPT-2 124M idle under zt's default and libgomp's (the
# cost of the default on an idle machine). Runs alternate between the settings, each in its own
# process, REPS times; the figure of a setting is the median of its runs' median steps, and
# the ratios are taken against the idle run of the same setting and of zt's default.
# One JSON line per run to bench/results/load.jsonl, then a summary line per setting.
# usage: bench/load.sh [build dir (default build)] [REPS (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-3}
zt="$build/zt"
out=bench/results/load.jsonl
[ -x "$zt" ] || { echo "bench/load.sh: $zt not found; run make first" >&2; exit 2; }
: >"$out"
tiny="--model gpt2-tiny --batch 8 --seq 256 --steps 20 --warmup-steps 2"
big="--model gpt2-124m --batch 4 --seq 256 --steps 5 --warmup-steps 1"
settings=("zt-default" "libgomp-default" "passive" "one-thread")
env_of() { # the setting's environment (ZT_NO_SPIN_BOUND: zt leaves libgomp's settings alone)
  case "$1" in
  zt-default) echo "ZT_LOAD_BENCH=1" ;;
  libgomp-default) echo "GOMP_SPINCOUNT=300000" ;;
  passive) echo "OMP_WAIT_POLICY=passive" ;;
  one-thread) echo "ZT_LOAD_BENCH=1" ;;
  esac
}
args_of() { [ "$1" = one-thread ] && echo "--threads 1" || echo "--threads 2"; }
hog_pid=""
hog_start() { (while :; do :; done) & hog_pid=$!; }
hog_stop() { [ -n "$hog_pid" ] && kill "$hog_pid" 2>/dev/null; wait "$hog_pid" 2>/dev/null || true; hog_pid=""; }
trap hog_stop EXIT
one() { # setting load model-args
  local e line
  e=$(env_of "$1")
  [ "$2" = busy ] && hog_start
  # shellcheck disable=SC2086
  line=$(env $e "$zt" bench step $3 $(args_of "$1") 2>/dev/null)
  [ "$2" = busy ] && hog_stop
  printf '{"load_setting":"%s","load":"%s",%s\n' "$1" "$2" "${line#\{}" | tee -a "$out"
}
for r in $(seq "$reps"); do
  for s in "${settings[@]}"; do
    one "$s" idle "$tiny"
    one "$s" busy "$tiny"
  done
  one zt-default idle "$big"
  one libgomp-default idle "$big"
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(setting, load, model):
    v = [r["ms_per_step"] for r in rows if r["load_setting"] == setting and r["load"] == load and r["model"] == model]
    return statistics.median(v) if v else float("nan")
base = med("zt-default", "idle", "gpt2-tiny")
for s in ["zt-default", "libgomp-default", "passive", "one-thread"]:
    i, b = med(s, "idle", "gpt2-tiny"), med(s, "busy", "gpt2-tiny")
    print(json.dumps({"summary": s, "model": "gpt2-tiny", "idle_ms": i, "busy_ms": b, "busy_over_own_idle": b / i,
                      "busy_over_zt_default_idle": b / base, "idle_over_zt_default_idle": i / base}))
a, b = med("zt-default", "idle", "gpt2-124m"), med("libgomp-default", "idle", "gpt2-124m")
print(json.dumps({"summary": "gpt2-124m idle", "zt_default_ms": a, "libgomp_default_ms": b, "ratio": a / b}))
PY
