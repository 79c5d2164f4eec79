#!/usr/bin/env bash
# Pipeline benchmark (issue 14): `zt train --pp 2` under mpirun -np 2 (one rank per core, one
# thread each) for every schedule on one GPT-2 shape, M = 4P = 8 microbatches. Per schedule,
# the median over the measured steps (the first is a warm-up) of: the step time, the measured
# bubble rate (1 - the ranks' compute time / (P x the step's schedule time)) next to the
# simulator's prediction from the same step's measured F/B/W costs, the pipeline efficiency
# (1 - bubble), each rank's F, B, W and waiting ms, and each rank's peak ACTIVATION bytes next
# to the simulator's peak (in microbatch units of one rank's share: `zt schedule --json`).
# One JSON line per schedule to bench/results/pipeline.jsonl, the table to
# bench/results/pipeline.md, and the measured-vs-simulated timelines of ZB-H1 and ZB-V to
# bench/results/pipeline-*.svg. Then the memory of pipeline x data parallel (rank 0's peak
# bytes per tag with DDP and each ZeRO strategy across 2 replicas) to
# bench/results/pipeline_dp_memory.md.
# usage: bench/pipeline.sh [build dir (default build)] [--quick: a small shape, 3 schedules |
#        --only "S1 S2 ...": run these schedules again, their rows replaced in the results (for
#        rows a neighbouring job disturbed: on a 2-core machine anything else running shows);
#        the name "memory" in the list runs the pipeline x data parallel part]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
zt="$build/zt"
[ -x "$zt" ] || { echo "bench/pipeline.sh: $zt not found; run make first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench/pipeline.sh: mpirun not found (apt-get install openmpi-bin)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
# Shared-memory transfers: CMA (the receiver copies straight from the sender) where the kernel
# allows it, as here; containers that forbid it need OMPI_MCA_btl_vader_single_copy_mechanism=none,
# with which a large message moves only while both ranks are inside MPI (see the README).
: "${OMPI_MCA_btl_vader_single_copy_mechanism:=cma}"
export OMPI_MCA_btl_vader_single_copy_mechanism
P=2 M=8
out=bench/results/pipeline.jsonl md=bench/results/pipeline.md
schedules=(1f1b gpipe interleaved zb-h1 zb-h2 zb-v v-half v-min dualpipev auto)
shape=(--layers 8 --dim 384 --heads 6 --batch 16 --seq 256 --steps 6)
if [ "${2:-}" = "--quick" ]; then
  out=${TMPDIR:-/tmp}/zt_pipeline_quick.jsonl md=${TMPDIR:-/tmp}/zt_pipeline_quick.md
  schedules=(1f1b zb-h1 zb-v)
  shape=(--layers 8 --dim 64 --heads 4 --batch 8 --seq 64 --steps 4)
fi
only=""
if [ "${2:-}" = "--only" ]; then
  only=${3:?"--only needs the schedules"}
  read -r -a schedules <<<"${only//memory/}"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -n "$only" ] && cp "$out" "$tmp/previous.jsonl"
: >"$out"
for s in "${schedules[@]}"; do
  mpirun -np $P --oversubscribe "$zt" train "${shape[@]}" --pp $P --schedule "$s" --microbatches $M --threads 1 \
    --dropout 0 --eval-every 1000000 --eval-batches 1 --metrics "$tmp/$s.jsonl" --timeline "$tmp/$s.svg" >"$tmp/$s.log" 2>&1 ||
    { echo "bench/pipeline.sh: $s failed:" >&2; tail -5 "$tmp/$s.log" >&2; exit 1; }
  lim=(); [ "$s" = auto ] && lim=(--mem-limit $P) # zt train plans auto under 1F1B's peak
  "$zt" schedule --schedule "$s" --stages $P --microbatches $M "${lim[@]}" --json >"$tmp/$s.sim.json"
  case $s in zb-h1 | zb-v) cp "$tmp/$s.svg" "bench/results/pipeline-$s.svg" ;; esac
  python3 - "$s" "$tmp/$s.jsonl" "$tmp/$s.sim.json" "$P" "$M" >>"$out" <<'EOF'
import json, statistics, sys
name, path, simpath, P, M = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
steps = [json.loads(l) for l in open(path)][1:]  # the first step warms up
med = lambda xs: statistics.median(xs)
sim = json.load(open(simpath))
row = {"bench": "pipeline", "schedule": name, "P": P, "M": M, "steps": len(steps),
       "step_ms": med([s["step_ms"] for s in steps]),
       "bubble": med([s["pp_bubble"] for s in steps]),
       "sim_bubble": med([s["pp_sim_bubble"] for s in steps]),
       "sim_bubble_equal_costs": sim["bubble_rate"],
       "tokens_per_s": med([s["tokens_per_s"] for s in steps])}
row["efficiency"] = 1 - row["bubble"]
ranks = []
for r in range(P):
    per = [s["ranks"][r] for s in steps]
    ranks.append({"rank": r, "f_ms": med([p["f_ms"] for p in per]), "b_ms": med([p["b_ms"] for p in per]),
                  "w_ms": med([p["w_ms"] for p in per]), "wait_ms": med([p["pp_wait_ms"] for p in per]),
                  "act_peak_bytes": max(p["mem_peak"]["ACTIVATION"] for p in per),
                  "sim_peak_units": sim["peak_activations"][r]})
row["ranks"] = ranks
print(json.dumps(row))
EOF
  tail -n 1 "$out"
done
if [ -n "$only" ]; then # the new rows in place of the old ones, in the old order
  python3 - "$tmp/previous.jsonl" "$out" >"$tmp/merged.jsonl" <<'EOF'
import json, sys
new = {json.loads(l)["schedule"]: l for l in open(sys.argv[2])}
for l in open(sys.argv[1]):
    name = json.loads(l)["schedule"]
    sys.stdout.write(new.pop(name, l))
for l in new.values():
    sys.stdout.write(l)
EOF
  cp "$tmp/merged.jsonl" "$out"
fi
python3 - "$out" >"$md" <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| schedule | step ms | measured bubble | simulated (measured costs) | simulated (F = B = W) | efficiency "
      "| F / B / W ms, rank 0 | F / B / W ms, rank 1 | peak activations MiB (units) rank 0 | rank 1 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: |")
for r in rows:
    rk = r["ranks"]
    fbw = lambda k: "%.0f / %.0f / %.0f" % (k["f_ms"], k["b_ms"], k["w_ms"])
    act = lambda k: "%.1f (%.3g)" % (k["act_peak_bytes"] / 2**20, k["sim_peak_units"])
    print("| %s | %.0f | %.1f%% | %.1f%% | %.1f%% | %.3f | %s | %s | %s | %s |" % (
        r["schedule"], r["step_ms"], 100 * r["bubble"], 100 * r["sim_bubble"], 100 * r["sim_bubble_equal_costs"],
        r["efficiency"], fbw(rk[0]), fbw(rk[1]), act(rk[0]), act(rk[1])))
EOF
[ -n "$only" ] && echo "bench/pipeline.sh: rows of ${schedules[*]} replaced in $out and $md" >&2
[ -n "$only" ] && [ "$only" = "${only//memory/}" ] && exit 0
# Pipeline x data parallel memory: 2 replicas of the 2-stage pipeline (4 ranks, oversubscribed
# here, so only the bytes count), zb-v, the stages' replicas under DDP and under each ZeRO
# strategy: rank 0's peak bytes per tag from the accounting, and its peak RSS.
mem=bench/results/pipeline_dp_memory.md
[ "${2:-}" = "--quick" ] && mem=${TMPDIR:-/tmp}/zt_pipeline_dp_memory_quick.md
for sh in none full grad_op opt; do
  mpirun -np $((2 * P)) --oversubscribe "$zt" train "${shape[@]}" --steps 2 --pp $P --schedule zb-v --microbatches 4 \
    --shard $sh --threads 1 --dropout 0 --eval-every 1000000 --eval-batches 1 --metrics "$tmp/dp-$sh.jsonl" \
    >"$tmp/dp-$sh.log" 2>&1 || { echo "bench/pipeline.sh: shard $sh failed:" >&2; tail -5 "$tmp/dp-$sh.log" >&2; exit 1; }
done
python3 - "$tmp" >"$mem" <<'EOF2'
import json, sys
print("| replicas' strategy | PARAM | GRAD | OPTIM | ACTIVATION | total | peak RSS |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for sh in ["none", "full", "grad_op", "opt"]:
    last = [json.loads(l) for l in open("%s/dp-%s.jsonl" % (sys.argv[1], sh))][-1]
    r0 = last["ranks"][0]
    m = lambda b: "%.1f MiB" % (b / 2**20)
    p = r0["mem_peak"]
    print("| %s | %s | %s | %s | %s | %s | %s |" % ("DDP" if sh == "none" else "ZeRO per step, " + sh, m(p["PARAM"]),
          m(p["GRAD"]), m(p["OPTIM"]), m(p["ACTIVATION"]), m(p["total"]), m(r0["peak_rss"])))
EOF2
cat "$mem"
echo "bench/pipeline.sh: results in $out, $md and $mem" >&2
