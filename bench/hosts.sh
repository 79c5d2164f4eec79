#!/usr/bin/env bash
# What running across hosts costs (docs/hosts.md): the hosts harness (tests/hosts/hosts_lib.sh),
# 2 hosts made of network namespaces on ONE machine (this one's cores, 2 here), as root.
# Appends JSON lines to bench/results/hosts.jsonl; bench/hosts_table.py makes the tables of
# bench/results/hosts.md from them. Not run by CI. About 30 minutes on the 2-core machine.
#   bench/hosts.sh [BUILD (build)] [PARTS (comm,faults,steps)]
# - comm: bench_comm (all-reduce, all-gather, reduce-scatter, broadcast, ping-pong; 4 B to
#   4 MiB; median of REPS (5) repetitions of ~0.2 s of calls) with 2 ranks: on one host
#   (shared memory), across 2 hosts clean, with 1 and 10 ms of delay, 1% loss, 1 Gbit/s and
#   100 Mbit/s (each on both hosts' links: hosts_netem), and with the progress thread
#   (ZT_COMM_PROGRESS=1) clean, at 1 ms and at 1 Gbit/s;
# - faults: tests/hosts/hosts_faults_test.sh with ZTH_FAULTS_JSONL (zt train, DDP and FSDP,
#   each fault against the clean run: bitwise, and the step time; the link-down case's times);
# - steps: zt train --model gpt2-124m, batch 4 x 32 tokens (global), 5 steps (the median of steps 3 to
#   5): DDP, FSDP full and a 2-stage pipeline (zb-h1, 2 microbatches) on 2 ranks, FSDP full and
#   hybrid:2 on 4 ranks (2 per host; hybrid shards within a host), each on one host (plain
#   mpirun), across 2 hosts unlimited and at 1 Gbit/s (with SLOW=1 also at 100 Mbit/s: DDP,
#   FSDP full, the pipeline and hybrid:2; FSDP full moves ~750 MB a rank a step: a minute a
#   step at 100 Mbit/s); DDP and the pipeline
#   with the progress thread across hosts, unlimited and at 1 Gbit/s. For the pipeline runs, the
#   simulator's step (zt schedule --costs F,B,W,C from the run's measured per-microbatch costs,
#   C the measured one-way time of one 192 KiB message (a microbatch of 2 x 32 activations) at that setting) next to the
#   measured step. STEP_SETTINGS (comma-separated: "one host", unlimited, "rate 1gbit", ...)
#   runs the steps at those settings only.
set -u
cd "$(dirname "$0")/.." || exit 1
B=${1:-build}
PARTS=${2:-comm,faults,steps}
REPS=${REPS:-5}
res=bench/results/hosts.jsonl
zt=$B/zt
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none ZTH_DELAY=$B/tests/zth_delay ZTH_MPI_TIMEOUT=900
. tests/hosts/hosts_lib.sh
meta="\"machine\":\"one VM, $(getconf _NPROCESSORS_ONLN) cores, hosts are network namespaces on it\",\"commit\":\"$(git rev-parse --short HEAD)\",\"date\":\"$(date -u +%FT%TZ)\""
tmp=$(mktemp -d)
# (hosts_up's EXIT trap runs hosts_down, then this)
trap 'rm -rf "$tmp"' EXIT
hosts_up 2 2
# fault SPEC...: the same setting on both hosts' links (clear: none)
fault() { local h; for h in 1 2; do hosts_netem "$h" "$@" || exit 1; done; }
has() { case ",$PARTS," in *",$1,"*) return 0 ;; esac; return 1; }

# ------------------------------------------------------------------ collectives and point to point
comm() { # comm SETTING PLACE PROGRESS
  local line
  if [ "$2" = one ]; then
    line=$(timeout 900 mpirun -np 2 --oversubscribe -x ZT_COMM_PROGRESS="$3" "$B/bench/bench_comm" "$REPS" "$1" 2>/dev/null | grep '^{')
  else
    line=$(hosts_mpirun -np 2 --map-by node -x ZT_COMM_PROGRESS="$3" "$B/bench/bench_comm" "$REPS" "$1" 2>/dev/null | grep '^{')
  fi
  [ -n "$line" ] || { echo "comm $1: no result" >&2; return; }
  echo "$line" | sed "s|^{|{\"setting\":\"$1\",\"place\":\"$2\",\"progress\":$3,$meta,|" | tee -a "$res" | cut -c1-200
}
if has comm; then
  comm "one host" one 0
  fault clear; comm clean hosts 0; comm clean hosts 1
  fault delay 1ms; comm "delay 1ms" hosts 0; comm "delay 1ms" hosts 1
  fault delay 10ms; comm "delay 10ms" hosts 0
  fault loss 1%; comm "loss 1%" hosts 0
  fault rate 1gbit; comm "rate 1gbit" hosts 0; comm "rate 1gbit" hosts 1
  fault rate 100mbit; comm "rate 100mbit" hosts 0
  fault clear
fi

# ------------------------------------------------------------------ zt train under each fault
if has faults; then
  ZTH_FAULTS_JSONL=$PWD/$res tests/hosts/hosts_faults_test.sh "$zt" "$ZTH_DELAY" 2>&1 | grep -v setpgid | grep -E '^  |passed'
fi

# ------------------------------------------------------------------ gpt2-124m's step
g=(train --model gpt2-124m --batch 4 --seq 32 --steps 5 --warmup 1 --threads 1 --sample-len 0 --eval-every 0 --dropout 0)
# ZTH_BENCH_SMALL=1: a small model instead (to try the script out)
[ -n "${ZTH_BENCH_SMALL:-}" ] && g=(train --layers 2 --dim 64 --heads 4 --batch 4 --seq 32 --steps 5 --warmup 1 --threads 1
  --sample-len 0 --eval-every 0 --dropout 0)
# step LAYOUT SETTING NP PLACE(one|node|slot) PROGRESS ZT ARGS...
step() {
  local lay=$1 set=$2 np=$3 place=$4 prog=$5 m t0 t1 rc
  shift 5
  m=$tmp/$lay-${set// /_}-$prog.jsonl
  rm -f "$m"
  t0=$(date +%s.%N)
  if [ "$place" = one ]; then
    timeout 900 mpirun -np "$np" --oversubscribe -x ZT_COMM_PROGRESS="$prog" "$zt" "${g[@]}" "$@" --metrics "$m" >"$tmp/out" 2>&1
  elif [ "$place" = node ]; then
    hosts_mpirun -np "$np" --map-by node -x ZT_COMM_PROGRESS="$prog" "$zt" "${g[@]}" "$@" --metrics "$m" >"$tmp/out" 2>&1
  else
    hosts_mpirun -np "$np" -x ZT_COMM_PROGRESS="$prog" "$zt" "${g[@]}" "$@" --metrics "$m" >"$tmp/out" 2>&1
  fi
  rc=$?
  t1=$(date +%s.%N)
  [ $rc -eq 0 ] || { echo "step $lay $set: status $rc: $(grep -v setpgid "$tmp/out" | tail -3)" >&2; return; }
  python3 - "$m" "$lay" "$set" "$np" "$place" "$prog" "$(echo "$t1 - $t0" | bc)" "$meta" "$zt" "$res" <<'PY' | tee -a "$res"
import json, statistics, subprocess, sys
m, lay, sett, np_, place, prog, wall, meta, zt, res = sys.argv[1:]
rows = [json.loads(l) for l in open(m) if l.startswith('{"step"')]
use = [r for r in rows if r["step"] >= 3] or rows
out = {"bench": "hosts_step", "model": "gpt2-124m", "batch": "4x32", "layout": lay, "setting": sett,
       "ranks": int(np_), "place": place, "progress": int(prog),
       "step_ms": statistics.median(r["step_ms"] for r in use),
       "steps_ms": [r["step_ms"] for r in rows], "run_s": round(float(wall), 1),
       "comm_wait_ms": statistics.median(max(k.get("comm_wait_ms", 0) for k in r["ranks"]) for r in use)}
last = use[-1]
if "pp_bubble" in last:
    M = 2
    f = statistics.mean(k["f_ms"] for k in last["ranks"]) / M
    b = statistics.mean(k["b_ms"] for k in last["ranks"]) / M
    w = statistics.mean(k["w_ms"] for k in last["ranks"]) / M
    # the measured one-way time of a 192 KiB message at this setting (bench_comm's ping-pong)
    c = 0.0
    want = {"one host": ("one host", "one"), "unlimited": ("clean", "hosts")}.get(sett, (sett, "hosts"))
    for l in open(res):
        try:
            d = json.loads(l)
        except ValueError:
            continue
        if d.get("bench") == "comm" and d.get("setting") == want[0] and d.get("place") == want[1] and d.get("progress") == 0:
            c = d["ops"]["sendrecv"]["196608"]["us"] / 1e3
    def sim(cc):
        j = subprocess.run([zt, "schedule", "--schedule", "zb-h1", "--stages", "2", "--microbatches", str(M),
                            "--costs", "%g,%g,%g,%g" % (f, b, w, cc), "--json"], capture_output=True, text=True).stdout
        return json.loads(j)
    s0, s1 = sim(0.0), sim(c)
    out.update({"pp_bubble": last["pp_bubble"], "pp_sim_bubble": last["pp_sim_bubble"],
                "f_ms": round(f, 2), "b_ms": round(b, 2), "w_ms": round(w, 2), "hop_ms": round(c, 3),
                "sim_step_ms_no_comm": round(s0["step_time"], 1), "sim_step_ms": round(s1["step_time"], 1),
                "sim_bubble": s1["bubble_rate"]})
print(json.dumps(out | json.loads("{" + meta + "}")))
PY
}
if has steps; then
  sets=("one host" unlimited "rate 1gbit" ${SLOW:+"rate 100mbit"})
  # STEP_SETTINGS="rate 1gbit,unlimited": only these (a repeat of some)
  [ -n "${STEP_SETTINGS:-}" ] && IFS=, read -r -a sets <<<"$STEP_SETTINGS"
  for set in "${sets[@]}"; do
    case $set in
      "one host") p2=one p4=one ;;
      unlimited) fault clear; p2=node p4=slot ;;
      *) fault "${set% *}" "${set#* }"; p2=node p4=slot ;;
    esac
    step ddp "$set" 2 $p2 0
    step full "$set" 2 $p2 0 --shard full
    step pp "$set" 2 $p2 0 --pp 2 --schedule zb-h1 --microbatches 2
    if [ "$set" != "rate 100mbit" ]; then
      step full4 "$set" 4 $p4 0 --shard full
      step hybrid4 "$set" 4 $p4 0 --shard hybrid:2
    else
      step hybrid4 "$set" 4 $p4 0 --shard hybrid:2
    fi
    if [ "$set" = unlimited ] || [ "$set" = "rate 1gbit" ]; then
      step ddp "$set" 2 $p2 1
      step pp "$set" 2 $p2 1 --pp 2 --schedule zb-h1 --microbatches 2
    fi
  done
  fault clear
fi
echo "bench/hosts.sh: done"
