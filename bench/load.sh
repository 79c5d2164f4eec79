#!/usr/bin/env bash
# Training beside other work (issue 25, item 8): `zt bench step` on the default model
# (gpt2-tiny, batch 8 x seq 256, as `make train` runs it) on an idle machine and beside one
# CPU-bound process (a shell busy loop), for each way the kernels' OpenMP threads may wait:
#   zt-default       zt's bounded spin (cli/main.c: GOMP_SPINCOUNT=ZT_CLI_SPINCOUNT, then sleep)
#   libgomp-default  GOMP_SPINCOUNT=300000, libgomp's own default: what zt did before
#   passive          OMP_WAIT_POLICY=passive (no spin at all)
#   one-thread       --threads 1
# then GPT-2 124M (batch 4 x seq 256) idle, zt's default against libgomp's: what the default
# costs on an idle machine. Runs alternate between the settings, each in its own process, REPS
# times; a run's figure is bench step's median step, a setting's the median of its runs'. One
# JSON line per run to bench/results/load.jsonl, then a summary per setting.
# usage: bench/load.sh [build dir (default build)] [REPS (default 3)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
reps=${2:-3}
zt="$build/zt"
out=bench/results/load.jsonl
[ -x "$zt" ] || { echo "bench/load.sh: $zt not found; run make first" >&2; exit 2; }
hog_pid=""
hog_start() { (while :; do :; done) & hog_pid=$!; }
hog_stop() { if [ -n "$hog_pid" ]; then kill "$hog_pid" 2>/dev/null || true; wait "$hog_pid" 2>/dev/null || true; fi; hog_pid=""; }
trap hog_stop EXIT
: >"$out"
tiny="--model gpt2-tiny --batch 8 --seq 256 --steps 20 --warmup-steps 2"
big="--model gpt2-124m --batch 4 --seq 256 --steps 5 --warmup-steps 1"
# one SETTING LOAD ARGS...: a bench step run as a JSON line with the setting and the load
one() {
  local setting=$1 load=$2 e="ZT_BENCH_LOAD=1" a="--threads 2" line
  shift 2
  case "$setting" in
  libgomp-default) e="GOMP_SPINCOUNT=300000" ;;
  passive) e="OMP_WAIT_POLICY=passive" ;;
  one-thread) a="--threads 1" ;;
  esac
  [ "$load" = busy ] && hog_start
  # shellcheck disable=SC2086
  line=$(env $e "$zt" bench step "$@" $a)
  hog_stop
  echo "{\"setting\":\"$setting\",\"load\":\"$load\",${line#\{}" | tee -a "$out"
}
for r in $(seq "$reps"); do
  for s in zt-default libgomp-default passive one-thread; do
    # shellcheck disable=SC2086
    one "$s" idle $tiny
    # shellcheck disable=SC2086
    one "$s" busy $tiny
  done
  for s in zt-default libgomp-default; do
    # shellcheck disable=SC2086
    one "$s" idle $big
  done
done
python3 - "$out" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
def med(s, load, model):
    v = [r["ms_per_step"] for r in rows if r["setting"] == s and r["load"] == load and r["model"] == model]
    return statistics.median(v) if v else float("nan")
old = med("libgomp-default", "idle", "gpt2-tiny")
for s in ["zt-default", "libgomp-default", "passive", "one-thread"]:
    i, b = med(s, "idle", "gpt2-tiny"), med(s, "busy", "gpt2-tiny")
    print(json.dumps({"summary": s, "model": "gpt2-tiny", "idle_ms": i, "busy_ms": b, "busy_over_own_idle": round(b / i, 3),
                      "busy_over_old_idle": round(b / old, 3), "idle_over_old_idle": round(i / old, 3)}))
a, b = med("zt-default", "idle", "gpt2-124m"), med("libgomp-default", "idle", "gpt2-124m")
print(json.dumps({"summary": "gpt2-124m idle", "zt_default_ms": a, "libgomp_default_ms": b, "ratio": round(a / b, 4)}))
PY
