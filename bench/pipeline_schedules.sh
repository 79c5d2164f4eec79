#!/usr/bin/env bash
# The simulator's table over every schedule family at P = 4, 8, 16 and M = P, 2P, 4P (costs
# F = B = W = 1 per rank's share, no communication): step time, bubble rate, and the peak
# activations (max over ranks, in microbatches through one rank's share). Writes markdown to
# stdout; bench/results/pipeline_schedules.md is its output.
# usage: bench/pipeline_schedules.sh [ZT_BINARY]   (default build/zt)
set -eu
zt="${1:-build/zt}"
echo "| schedule | P | M | step time | bubble rate | peak activations (max rank) |"
echo "| --- | ---: | ---: | ---: | ---: | ---: |"
for s in gpipe 1f1b interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev auto; do
  for P in 4 8 16; do
    for mul in 1 2 4; do
      M=$((P * mul))
      if ! j=$("$zt" schedule --schedule "$s" --stages "$P" --microbatches "$M" --json 2>&1); then
        echo "| $s | $P | $M | - | - | ${j#zt schedule: } |" | sed 's/ \[[a-z_]*\.c:[0-9]*\]//'
        continue
      fi
      python3 -c '
import json, sys
d = json.loads(sys.argv[1])
print("| %s | %s | %s | %g | %.1f%% | %g |" % (sys.argv[2], sys.argv[3], sys.argv[4], d["step_time"],
      100 * d["bubble_rate"], max(d["peak_activations"])))' "$j" "$s" "$P" "$M"
    done
  done
done
