#!/usr/bin/env bash
# The multi-rank test programs across separate hosts (tests/hosts/hosts_lib.sh: network
# namespaces on a bridge, ranks launched into them by mpirun through a launcher agent, TCP
# only between hosts). First what OpenMPI makes of the hosts (hosts_probe: each rank's
# processor name and MPI_Comm_split_type(SHARED) group are its host's; shared memory alone
# does not reach across hosts); then each program that runs under mpirun in tests/CMakeLists.txt
# (their own checks: every strategy against single-process training) at 2 hosts x 2 ranks,
# 2 hosts x 1 rank (also with the progress thread) and 4 hosts x 1 rank; then a stopped rank on another host, which ends the
# job within --comm-timeout. ctest label hosts; exit 77 (skipped) where namespaces cannot be
# made.
# Usage: hosts_dist_test.sh TESTS_DIR HOSTS_PROBE   (TESTS_DIR: the build's tests/ folder)
set -u
bin=$1
probe=$2
. "$(dirname "$0")/../check_lib.sh"
. "$(dirname "$0")/hosts_lib.sh"
export OMP_NUM_THREADS=1
t_start=$(date +%s)

# probe [MPIRUN ARGS]: one line per rank, "rank R host NAME node-group G size S first F"
probe_lines() { sed -n 's/^rank \([0-9]*\) host \([^ ]*\) node-group \([0-9]*\) size \([0-9]*\).*/\1 \2 \3 \4/p' <<<"$out" | tr '\n' ';'; }
# prog NAME NP [MPIRUN ARGS]: the test program's own checks pass across the hosts
prog() {
  local name=$1 np=$2 t0
  shift 2
  t0=$(date +%s.%N)
  out=$(hosts_mpirun -np "$np" "$@" "$bin/$name" 2>&1)
  local rc=$?
  printf '  %s -np %s %s: exit %s after %.1f s\n' "$name" "$np" "$*" "$rc" "$(echo "$(date +%s.%N) - $t0" | bc)"
  [ $rc -eq 0 ] && ! grep -q "^FAIL" <<<"$out"
}

# --- 2 hosts x 2 slots
hosts_up 2 2
# bytes through host 1's link (its veth's end on the bridge, both ways)
link_bytes() { echo $(( $(cat "/sys/class/net/${zth_prefix}v1/statistics/rx_bytes") + $(cat "/sys/class/net/${zth_prefix}v1/statistics/tx_bytes") )); }
b0=$(link_bytes)
out=$(hosts_mpirun -np 4 "$probe" 2>&1)
b1=$(link_bytes)
check "2x2 by slot: ranks 0,1 on zth-h1 and 2,3 on zth-h2, one node group per host" \
  '[ "$(probe_lines)" = "0 zth-h1 0 2;1 zth-h1 0 2;2 zth-h2 2 2;3 zth-h2 2 2;" ] && grep -q "bytes: ok" <<<"$out"'
# the ring exchange alone sends 1 MiB from rank 1 (host 1) to rank 2 (host 2) and 1 MiB back
# from rank 3 to rank 0
check "the bytes between hosts go over host 1's veth link ($(( (b1 - b0) / 1024 )) KiB)" '[ $((b1 - b0)) -gt 2000000 ]'
out=$(hosts_mpirun -np 4 --map-by node "$probe" 2>&1)
check "2x2 by node: ranks 0,2 on zth-h1 and 1,3 on zth-h2, one node group per host" \
  '[ "$(probe_lines)" = "0 zth-h1 0 2;1 zth-h2 1 2;2 zth-h1 0 2;3 zth-h2 1 2;" ] && grep -q "bytes: ok" <<<"$out"'
out=$(ZTH_BTL=self,vader hosts_mpirun -np 4 "$probe" 2>&1)
check "shared memory (vader) alone does not reach across hosts: only TCP does" \
  '! grep -q "bytes: ok" <<<"$out" && grep -q "unable to reach each other" <<<"$out"'
out=$(ZTH_BTL=tcp,self,vader hosts_mpirun -np 4 "$probe" 2>&1)
check "tcp + vader (shared memory within a host): the same groups" \
  '[ "$(probe_lines)" = "0 zth-h1 0 2;1 zth-h1 0 2;2 zth-h2 2 2;3 zth-h2 2 2;" ] && grep -q "bytes: ok" <<<"$out"'

# 2 ranks per host (by slot: FSDP's hybrid groups of 2 shard within a host and replicate
# across; a 2 x 2 pipeline grid has each pipeline on one host, each stage's replicas across)
for t in test_comm test_ddp test_fsdp test_fsdp_store test_guarded_fsdp test_zero test_snapshot_sharded \
  test_pipeline_run test_llama_strategies; do
  [ -x "$bin/$t" ] || continue
  check "$t, 2 hosts x 2 ranks" 'prog $t 4'
done
# by node (ranks alternate between the hosts: hybrid groups across hosts, pipeline stages on
# different hosts, each stage's replicas on one)
for t in test_fsdp test_pipeline_run; do
  check "$t, 2 hosts x 2 ranks, by node" 'prog $t 4 --map-by node'
done
# one rank per host
for t in test_ddp test_fsdp test_snapshot_sharded test_pipeline_run; do
  check "$t, 2 hosts x 1 rank" 'prog $t 2 --map-by node'
done
# with the comm layer's progress thread (ZT_COMM_PROGRESS=1: a thread calling into MPI while
# operations are in flight), as the mpi label's *_progress tests run on one host
export ZT_COMM_PROGRESS=1 ZT_COMM_PROGRESS_US=50
for t in test_comm test_ddp test_pipeline_run; do
  check "$t, 2 hosts x 1 rank, progress thread" 'prog $t 2 --map-by node -x ZT_COMM_PROGRESS -x ZT_COMM_PROGRESS_US'
done
unset ZT_COMM_PROGRESS ZT_COMM_PROGRESS_US

# --- 4 hosts x 1 slot
hosts_down
hosts_up 4 1
out=$(hosts_mpirun -np 4 "$probe" 2>&1)
check "4 hosts: one rank per host, a node group each" \
  '[ "$(probe_lines)" = "0 zth-h1 0 1;1 zth-h2 1 1;2 zth-h3 2 1;3 zth-h4 3 1;" ] && grep -q "bytes: ok" <<<"$out"'
for t in test_ddp test_fsdp test_pipeline_run; do
  check "$t, 4 hosts x 1 rank" 'prog $t 4'
done

# --- a rank stopped on another host (comm_fault's scenarios on 3 hosts, 3 s timeouts): the
# others time out and end the job (exit 3, from zt_comm_abort), the stopped rank too, and their
# messages name the missing ranks with their hosts, read from the other hosts' board servers
# (src/comm/board_remote.c). A stopped rank alone on its host cannot answer (its server thread
# stops with it): it is named as not answering. One sharing a host with a running rank is read
# through that rank's server, with its process state from that host.
fault() { # NAME SCENARIO [mpirun options]: runs it, sets rc, el and out
  local name=$1 sc=$2 t0
  shift 2
  t0=$(date +%s.%N)
  out=$(ZTH_MPI_TIMEOUT=60 hosts_mpirun -np 3 "$@" -x ZT_FAULT_DIR -x ZT_COMM_TIMEOUT "$bin/comm_fault" "$sc" 2>&1)
  rc=$?
  el=$(echo "$(date +%s.%N) - $t0" | bc)
  echo "  comm_fault $sc across hosts ($name): exit $rc after $el s"
  grep -o "failed: .*\[board.c" <<<"$out" | sort -u | sed 's/^/  | /'
}
if [ -x "$bin/comm_fault" ]; then
  hosts_down
  hosts_up 3 1
  export ZT_FAULT_DIR=$w/fault ZT_COMM_TIMEOUT=3
  mkdir -p "$ZT_FAULT_DIR"
  fault "3 x 1" stop
  check "a rank stopped on another host: the others time out after 3 s and end the job" \
    '[ $rc -eq 3 ] && awk -v e="$el" "BEGIN { exit !(e > 2.5 && e < 30) }" &&
     grep -q "timed out after 3 s on world rank [01] on zth-h1\|timed out after 3 s on world rank [01] on zth-h2" <<<"$out"'
  check "... naming it, and that its host does not answer" \
    'grep -q "unknown for world rank 2 (not on this node, and its host zth-h3: [0-9.]*:[0-9]*: no answer (its process is stopped or busy))" <<<"$out"'
  fault "3 x 1" recv
  check "a receive from a rank stopped on another host: rank 1 reads rank 0's entry on a third host" \
    '[ $rc -eq 3 ] && grep -q "world rank 0 on zth-h1 did not arrive (1 call behind: its last collective on this group was call #1, barrier at comm_fault_main.c:[0-9]*; it is blocked in zt_recv from world rank 2 on zth-h3)" <<<"$out"'
  hosts_down
  hosts_up 2 2
  # "later": rank 2 (on zth-h1 with rank 0, which pauses) stops; rank 1 (on zth-h2) times out alone
  fault "2 x 2 by node" later --map-by node
  check "a stopped rank sharing a host: read through its neighbour's server, its process stopped" \
    '[ $rc -eq 3 ] && grep -q "on world rank 1 on zth-h2 (worker b; group rank 0), call #1 on this group of 2 ranks: world rank 2 on zth-h1 (worker c; group rank 1) did not arrive (1 call behind: .*its process (pid [0-9]*) is stopped)" <<<"$out"'
  fault "2 x 2 by node" slow --map-by node
  check "a rank 1 s late on another host: no error, and no rank spun a core while it waited" \
    '[ $rc -eq 0 ] && ! grep -q FAIL <<<"$out" && [ "$(grep -c waited <<<"$out")" = 3 ]'
  unset ZT_FAULT_DIR ZT_COMM_TIMEOUT
fi
echo "hosts_dist: $(( $(date +%s) - t_start )) s"
check_summary hosts_dist
