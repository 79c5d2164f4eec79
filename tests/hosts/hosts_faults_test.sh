#!/usr/bin/env bash
# Network faults between the hosts of the harness (tests/hosts/hosts_lib.sh: hosts_netem,
# hosts_link), 2 hosts x 1 rank, zt train with DDP and FSDP full:
# - a delay of 1 ms and of 10 ms, 1% packet loss, the rate limited to 1 Gbit/s (each on both
#   hosts' links): the clean run's losses, validation losses and grad norms, bitwise; what it
#   cost is printed (median step time and the run's wall time against the clean run's) and,
#   where ZTH_FAULTS_JSONL names a file, appended to it as JSON lines (bench/hosts.sh);
# - host 2's link set down in the middle of a step (FSDP full with a sharded checkpoint every 2
#   steps into a folder both hosts see; DDP with rank 0's single-file one): every rank ends within the comm timeout (5 s) and a
#   margin, each naming the other host and its rank as unreachable; the last checkpoint is
#   whole; once the link is up again mpirun ends too, leaving nothing on either host (while it
#   is down, mpirun waits for the unreachable host's orted: docs/hosts.md); resumed from the
#   checkpoint, the run's losses are the uninterrupted run's, bitwise.
# ctest label hosts; exit 77 (skipped) where namespaces cannot be made.
# Usage: hosts_faults_test.sh path/to/zt path/to/zth_delay
set -u
zt=$1
export ZTH_DELAY=$2
. "$(dirname "$0")/../check_lib.sh"
. "$(dirname "$0")/hosts_lib.sh"
export OMP_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t_start=$(date +%s)

base=(train --layers 2 --dim 64 --heads 4 --batch 8 --seq 32 --steps 6 --warmup 1 --lr 3e-3 --dropout 0 --threads 1
  --eval-every 6 --eval-batches 2 --sample-len 0 --grad-clip 0.5)
figures() { echo "$(losses "$1" | tr '\n' ' ')/$(vals "$1" | tr '\n' ' ')/$(norms "$1" | tr '\n' ' ')"; }
same() { [ -n "$(losses "$1")" ] && [ "$(figures "$1")" = "$(figures "$2")" ]; }
# the median step time (ms) of a --metrics file, steps 2 on (step 1 pays the first touches)
step_ms() { sed -n 's/^{"step":\([0-9]*\),.*"step_ms":\([0-9.]*\),.*/\1 \2/p' "$1" | awk '$1 > 1 {print $2}' | sort -g |
  awk '{a[NR] = $1} END {print NR ? a[int((NR + 1) / 2)] : 0}'; }
declare -A wall ms
# run NAME LAYOUT...: zt train across the 2 hosts, its wall time in wall[NAME]
run() {
  local name=$1 t0 t1
  shift
  t0=$(date +%s.%N)
  out=$(hosts_mpirun -np 2 --map-by node "$zt" "${base[@]}" "$@" --metrics "$w/$name.jsonl" 2>&1)
  t1=$(date +%s.%N)
  wall[$name]=$(echo "$t1 - $t0" | bc)
  ms[$name]=$(step_ms "$w/$name.jsonl")
}
declare -A lay=([ddp]="" [fsdp]="--shard full")

hosts_up 2 1
for l in ddp fsdp; do
  # shellcheck disable=SC2086
  run "$l-clean" ${lay[$l]}
  printf '  %-5s clean: step %s ms, run %.1f s: %s\n' "$l" "${ms[$l-clean]}" "${wall[$l-clean]}" "$(losses "$w/$l-clean.jsonl" | tr '\n' ' ')"
done
# each fault on both hosts' links: a packet between them meets it once each way
faults=("delay 1ms" "delay 10ms" "loss 1%" "rate 1gbit")
# the delay and the loss need iptables (hosts_netem); the rate only tc
if ! command -v iptables >/dev/null 2>&1; then
  echo "  SKIP delay and loss: no iptables (Debian: apt-get install iptables); the rate and the link down run"
  faults=("rate 1gbit")
fi
for f in "${faults[@]}"; do
  for h in 1 2; do
    # shellcheck disable=SC2086 # the words of the fault: hosts_netem H delay 1ms
    hosts_netem "$h" $f || { echo "FAIL hosts_netem $h $f"; fail=$((fail + 1)); }
  done
  k=${f// /-}
  k=${k//%/}
  for l in ddp fsdp; do
    # shellcheck disable=SC2086
    run "$l-$k" ${lay[$l]}
    printf '  %-5s %-10s: step %s ms (clean %s), run %.1f s (clean %.1f)\n' "$l" "$f" "${ms[$l-$k]}" "${ms[$l-clean]}" \
      "${wall[$l-$k]}" "${wall[$l-clean]}"
    check "$l, $f on both links: the clean run's figures, bitwise" 'same "$w/$l-clean.jsonl" "$w/$l-$k.jsonl"'
    if [ -n "${ZTH_FAULTS_JSONL:-}" ]; then
      printf '{"bench":"hosts_faults","hosts":2,"ranks":2,"layout":"%s","fault":"%s","model":"layers 2 dim 64 batch 8x32","step_ms":%s,"clean_step_ms":%s,"run_s":%.2f,"clean_run_s":%.2f,"bitwise":%s,"machine":"one 2-core VM, hosts are network namespaces","date":"%s"}\n' \
        "$l" "$f" "${ms[$l-$k]}" "${ms[$l-clean]}" "${wall[$l-$k]}" "${wall[$l-clean]}" \
        "$(same "$w/$l-clean.jsonl" "$w/$l-$k.jsonl" && echo true || echo false)" "$(date -u +%FT%TZ)" >>"$ZTH_FAULTS_JSONL"
    fi
  done
done
for h in 1 2; do hosts_netem "$h" clear; done

# --- host 2's link down in the middle of a step
# (4 blocks of width 128 over 64 tokens: about 70 ms a step here, so the link goes down well
# before the end)
long=(train --layers 4 --dim 128 --heads 4 --batch 8 --seq 64 --steps 60 --warmup 1 --lr 3e-3 --dropout 0 --threads 1
  --eval-every 0 --sample-len 0 --comm-timeout 5)
# zt processes (the ranks) still in a host's namespace
zt_exe=$(readlink -f "$zt")
ranks_in() {
  local p n=0
  for p in $(ip netns pids "${zth_prefix}h$1" 2>/dev/null); do
    [ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$zt_exe" ] && n=$((n + 1))
  done
  echo $n
}
# link_cut NAME LAYOUT...: the run with a checkpoint every 2 steps into $w/NAME-ck (a folder both
# hosts see), host 2's link pulled out once step 4's is committed, then put back; resumed
link_cut() {
  local L=$1 t_down t_up mp rc running ended mp_down mp_end left last kstep
  shift
  out=$(hosts_mpirun -np 2 --map-by node "$zt" "${long[@]}" "$@" --metrics "$w/$L-full.jsonl" 2>&1)
  hosts_mpirun -np 2 --map-by node "$zt" "${long[@]}" "$@" --save "$w/$L-ck" --save-every 2 --metrics "$w/$L-cut.jsonl" \
    >"$w/$L-cut.out" 2>&1 &
  mp=$!
  # the link goes down once the checkpoint of step 4 is committed (the run is then in step 5 or 6)
  for _ in $(seq 600); do
    case $(readlink "$w/$L-ck/latest" 2>/dev/null) in step-0000000[4-9] | step-000000[1-9]*) break ;; esac
    sleep 0.05
  done
  running=$(($(ranks_in 1) + $(ranks_in 2)))
  hosts_link 2 down
  t_down=$(date +%s.%N)
  echo "  $L: link of host 2 down after the checkpoint $(readlink "$w/$L-ck/latest") (of 60 steps), $running ranks running"
  ended=""
  for _ in $(seq 300); do
    if [ "$(ranks_in 1)" -eq 0 ] && [ "$(ranks_in 2)" -eq 0 ]; then
      ended=$(echo "$(date +%s.%N) - $t_down" | bc)
      break
    fi
    sleep 0.1
  done
  echo "  $L: every rank ended ${ended:-(not within 30 s)} s after the link went down (comm timeout 5 s)"
  check "$L, link down mid-step: every rank on both hosts ends within the comm timeout + 5 s" \
    '[ "$running" -eq 2 ] && [ -n "$ended" ] && [ "$(echo "$ended < 10" | bc)" -eq 1 ]'
  mp_down=no
  kill -0 $mp 2>/dev/null || mp_down=yes
  hosts_link 2 up
  t_up=$(date +%s.%N)
  mp_end=""
  for _ in $(seq 600); do
    if ! kill -0 $mp 2>/dev/null; then
      mp_end=$(echo "$(date +%s.%N) - $t_up" | bc)
      break
    fi
    sleep 0.1
  done
  wait $mp
  rc=$?
  echo "  $L: mpirun ended while the link was down: $mp_down; ended ${mp_end:-(not within 60 s)} s after it came up, status $rc"
  out=$(cat "$w/$L-cut.out")
  check "... mpirun ends (within 60 s of the link coming back), with a failure status" \
    '[ -n "$mp_end" ] && [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $rc -ne 137 ]'
  left=""
  for _ in $(seq 50); do
    left=$(for h in 1 2; do ip netns pids "${zth_prefix}h$h" 2>/dev/null; done | xargs -r ps -o pid=,comm= -p 2>/dev/null)
    [ -z "$left" ] && break
    sleep 0.1
  done
  out=$left
  check "... and nothing of the job is left on either host (no rank, no orted)" '[ -z "$left" ]'
  out=$(cat "$w/$L-cut.out")
  check "... rank 0 names rank 1 and its host zth-h2 as unreachable" \
    'grep -q "rank 0 of 2).*timed out after 5 s.*world rank 1 (not on this node, and its host zth-h2: [0-9.:]*: no connection in time (the host is unreachable))" <<<"$out"'
  check "... rank 1 names rank 0 and its host zth-h1 as unreachable" \
    'grep -q "rank 1 of 2).*timed out after 5 s.*world rank 0 (not on this node, and its host zth-h1: [0-9.:]*: no connection in time (the host is unreachable))" <<<"$out"'
  grep "timed out" <<<"$out" | sed 's/^/    /' | cut -c1-400
  if [ -n "${ZTH_FAULTS_JSONL:-}" ]; then
    printf '{"bench":"hosts_faults","hosts":2,"ranks":2,"layout":"%s","fault":"link down mid-step","model":"layers 4 dim 128 batch 8x64","comm_timeout_s":5,"ranks_ended_s":%s,"mpirun_ended_while_down":"%s","mpirun_after_up_s":%s,"machine":"one 2-core VM, hosts are network namespaces","date":"%s"}\n' \
      "$L" "${ended:-null}" "$mp_down" "${mp_end:-null}" "$(date -u +%FT%TZ)" >>"$ZTH_FAULTS_JSONL"
  fi
  last=$(basename "$(readlink "$w/$L-ck/latest")")
  kstep=$((10#${last#step-}))
  echo "  $L: last checkpoint: $last"
  if [ "$L" = fsdp ]; then
    check "... the last checkpoint is whole (an index and both shards)" \
      '[ -f "$w/$L-ck/latest/index.json" ] && [ "$(ls "$w/$L-ck/latest/" | grep -c "^shard-[01]-of-2.safetensors$")" -eq 2 ]'
  else
    check "... the last checkpoint is whole (model and optimizer state)" \
      '[ -f "$w/$L-ck/latest/model.safetensors" ] && [ -f "$w/$L-ck/latest/optim.safetensors" ]'
  fi
  out=$(hosts_mpirun -np 2 --map-by node "$zt" "${long[@]}" "$@" --save "$w/$L-ck" --resume "$w/$L-ck" \
    --metrics "$w/$L-res.jsonl" 2>&1)
  awk -v k="$kstep" -F'[:,]' '$2 > k' "$w/$L-full.jsonl" >"$w/$L-tail.jsonl"
  check "... resumed from it once the link is up: steps $((kstep + 1))..60 of the uninterrupted run, bitwise" \
    '[ "$kstep" -ge 2 ] && [ "$(losses "$w/$L-res.jsonl" | wc -l)" -eq $((60 - kstep)) ] &&
     [ "$(losses "$w/$L-res.jsonl")" = "$(losses "$w/$L-tail.jsonl")" ] && [ "$(norms "$w/$L-res.jsonl")" = "$(norms "$w/$L-tail.jsonl")" ]'
}
link_cut fsdp --shard full
link_cut ddp
echo "hosts_faults: $(($(date +%s) - t_start)) s"
check_summary hosts_faults
