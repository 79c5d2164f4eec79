#!/usr/bin/env bash
# Comm fault scenarios under mpirun -np 3 (ctest label mpi): a stopped rank makes the others
# time out with a message naming it and end the job; a rank that aborts ends the job at
# once with its message; a slow rank within the timeout is not an error.
#   comm_fault_test.sh PATH/TO/comm_fault [mpirun]
set -u
BIN=${1:?usage: comm_fault_test.sh PATH/TO/comm_fault [mpirun]}
MPIRUN=${2:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none OMP_NUM_THREADS=1
DIR=$(mktemp -d)
export ZT_FAULT_DIR=$DIR
FAILED=0

# Kill (by pid) any rank a scenario left behind.
cleanup_ranks() {
  for f in "$DIR"/pid.*; do
    [ -e "$f" ] || continue
    pid=$(cat "$f")
    # alive and not a zombie (a container's init may not reap orphans)
    state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)
    if [ -n "$state" ] && [ "$state" != Z ] && kill -0 "$pid" 2>/dev/null; then
      echo "  leftover rank process $pid: killing it"
      kill -CONT "$pid" 2>/dev/null
      kill -KILL "$pid" 2>/dev/null
      FAILED=1
    fi
    rm -f "$f"
  done
}
trap 'cleanup_ranks; rm -rf "$DIR"' EXIT

fail() {
  echo "FAIL ($1): $2"
  sed 's/^/  | /' "$DIR/out"
  FAILED=1
}

# run SCENARIO TIMEOUT_S: runs the job (killed after 60 s), sets RC, ELAPSED; output in $DIR/out
run() {
  local t0 t1
  t0=$(date +%s.%N)
  ZT_COMM_TIMEOUT=$2 timeout -k 5 60 "$MPIRUN" -np 3 --oversubscribe "$BIN" "$1" >"$DIR/out" 2>&1
  RC=$?
  t1=$(date +%s.%N)
  ELAPSED=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f", b - a }')
  sleep 0.5 # let mpirun's kills land before looking for leftovers
  cleanup_ranks
  echo "$1: exit $RC after ${ELAPSED} s"
}

under() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }
has() { grep -q -- "$1" "$DIR/out"; }

# (a) rank 2 stops itself before an all_reduce: ranks 0 and 1 time out after 3 s naming it,
#     then abort; the whole job (the stopped rank too) ends well within 30 s.
run stop 3
[ "$RC" = 3 ] || fail stop "exit status $RC (want 3, the code ranks 0 and 1 passed to zt_comm_abort)"
under "$ELAPSED" 30 || fail stop "took $ELAPSED s"
under 2.5 "$ELAPSED" || fail stop "ended after $ELAPSED s, before the 3 s timeout could fire"
# (whichever of ranks 0 and 1 times out first aborts the job: either one's message will do)
for want in "rank [01]: all_reduce failed: all_reduce at comm_fault_main.c:" \
  "timed out after 3 s on world rank [01], call #2 on this group of 3 ranks" \
  "world rank 2 did not arrive (1 call behind" "barrier at comm_fault_main.c:" "zt_comm_abort"; do
  has "$want" || fail stop "no '$want' in the output"
done

# (a') rank 0 receives from the stopped rank: zt_recv names the peer; rank 1's barrier
#      names both missing ranks, rank 0 as blocked in its receive.
run recv 3
[ "$RC" = 3 ] || fail recv "exit status $RC (want 3, from zt_comm_abort)"
under "$ELAPSED" 30 || fail recv "took $ELAPSED s"
for want in "zt_recv at comm_fault_main.c:[0-9]* (tag 7) from world rank 2 timed out after 3 s on world rank 0: " \
  "the sender did not post the matching send" "it is blocked in zt_recv from world rank 2"; do
  has "$want" || fail recv "no '$want' in the output"
done

# (a'') in a group of world ranks 1 and 2 (group ranks 0 and 1, labelled by a namer), rank 2
#      stops: rank 1's all_reduce names it by world rank, label and group rank, and its later
#      calls on the group fail at once with messages that carry that first one whole.
run later 3
[ "$RC" = 3 ] || fail later "exit status $RC (want 3, from zt_comm_abort)"
under "$ELAPSED" 30 || fail later "took $ELAPSED s"
first="world rank 2 (worker c; group rank 1) did not arrive (1 call behind"
for want in "rank 1: first: all_reduce at comm_fault_main.c:[0-9]* timed out after 3 s on world rank 1 (worker b; group rank 0), call #1 on this group of 2 ranks: $first" \
  "rank 1: later wait: ZT_STATUS_COMM after 0.0 s: zt_comm_wait: this group is unusable after an earlier failure on this rank: all_reduce at comm_fault_main.c:[0-9]* timed out after 3 s .*$first" \
  "rank 1: later barrier: ZT_STATUS_COMM after 0.0 s: zt_barrier: this group is unusable after an earlier failure on this rank: all_reduce at comm_fault_main.c:[0-9]* timed out after 3 s .*$first"; do
  has "$want" || fail later "no '$want' in the output"
done

# (a''') the same as (a') with a board per rank (ZT_COMM_BOARD_SCOPE=rank), as if each rank
#      were on its own host: the others' entries come from their board servers over TCP. Rank
#      1 reads rank 0's entry remotely (blocked in its receive); rank 2's server, stopped with
#      its process, does not answer, and the message says so.
ZT_COMM_BOARD_SCOPE=rank run recv 3
[ "$RC" = 3 ] || fail recv-remote "exit status $RC (want 3, from zt_comm_abort)"
under "$ELAPSED" 30 || fail recv-remote "took $ELAPSED s"
for want in "world rank 0 on node 0 did not arrive (1 call behind: its last collective on this group was call #1, barrier at comm_fault_main.c:[0-9]*; it is blocked in zt_recv from world rank 2 on node 2)" \
  "unknown for world rank 2 (not on this node, and its host node 2: [0-9.]*:[0-9]*: no answer (its process is stopped or busy))"; do
  has "$want" || fail recv-remote "no '$want' in the output"
done

# (b) rank 1 fails and aborts while the others wait in an all_reduce (timeout 30 s, so
#     only the abort can end it quickly).
run abort 30
[ "$RC" = 4 ] || fail abort "exit status $RC (want 4, the code rank 1 passed to zt_comm_abort)"
under "$ELAPSED" 10 || fail abort "took $ELAPSED s"
has "rank 1: cannot read the batch file" || fail abort "no message from rank 1"
has "unexpected" && fail abort "a waiting rank returned from its all_reduce"

# (c) rank 2 arrives 1 s late with a 3 s timeout: no error, and the waiting ranks did not
#     spin a core while they waited.
run slow 3
[ "$RC" = 0 ] || fail slow "exit status $RC (a slow rank within the timeout must not fail)"
has "FAIL" && fail slow "a rank reported a failure"
[ "$(grep -c 'waited' "$DIR/out")" = 3 ] || fail slow "not every rank reported"

if [ "$FAILED" = 0 ]; then echo "comm_fault: all scenarios passed"; fi
exit $FAILED
