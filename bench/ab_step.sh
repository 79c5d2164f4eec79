#!/usr/bin/env bash
# Two builds of zt, alternated back to back on the same training step, so that a change is
# measured against what it replaced under the same conditions: OLD NEW [PAIRS (5)] [zt bench
# step options (--model gpt2-124m --batch 4 --seq 256)]. Prints each run's JSON line with its
# build's name, then both medians and their ratio (new / old ms per step).
# Example: bench/ab_step.sh /tmp/old/build/zt build/zt 5
set -euo pipefail
old=${1:?usage: bench/ab_step.sh OLD_ZT NEW_ZT [PAIRS] [zt bench step options]}
new=${2:?usage: bench/ab_step.sh OLD_ZT NEW_ZT [PAIRS] [zt bench step options]}
pairs=${3:-5}
shift $(($# < 3 ? $# : 3))
opts=("$@")
[ ${#opts[@]} -gt 0 ] || opts=(--model gpt2-124m --batch 4 --seq 256)
runs=$(mktemp)
trap 'rm -f "$runs"' EXIT
for i in $(seq "$pairs"); do
  for b in old new; do
    z=$old
    [ $b = new ] && z=$new
    line=$("$z" bench step "${opts[@]}" | tail -n 1)
    echo "{\"build\":\"$b\",\"pair\":$i,\"run\":$line}" | tee -a "$runs"
  done
done
python3 - "$runs" <<'PY'
import json, statistics, sys
ms = {"old": [], "new": []}
for l in open(sys.argv[1]):
    r = json.loads(l)
    ms[r["build"]].append(r["run"]["ms_per_step"])
o, n = statistics.median(ms["old"]), statistics.median(ms["new"])
print(json.dumps({"bench": "ab_step", "old_ms": o, "new_ms": n, "new_over_old": round(n / o, 4)}))
PY
