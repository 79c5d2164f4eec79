#!/usr/bin/env bash
# mpirun across the hosts of a harness that hosts_up (tests/hosts/hosts_lib.sh) made, with the
# transports restricted to what separate hosts share: TCP on the harness's subnet. Usable
# wherever a test takes an mpirun command (comm_fault_test.sh's second argument). Reads
# ZTH_HOSTFILE, ZTH_SUBNET and ZTH_HOSTS_MAP (exported by hosts_up); ZTH_BTL (default
# tcp,self: tcp,self,vader adds shared memory between the ranks of one host, which OpenMPI
# never uses between hosts); ZTH_MPI_TIMEOUT (seconds, default 300; 0: none).
#   hosts_mpirun.sh -np 4 [--map-by node] PROGRAM ARGS...
set -u
if [ -z "${ZTH_HOSTFILE:-}" ] || [ -z "${ZTH_SUBNET:-}" ] || [ -z "${ZTH_HOSTS_MAP:-}" ]; then
  echo "hosts_mpirun.sh: no hosts (ZTH_HOSTFILE, ZTH_SUBNET, ZTH_HOSTS_MAP unset): run hosts_up of tests/hosts/hosts_lib.sh first" >&2
  exit 2
fi
dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
omp=()
[ -n "${OMP_NUM_THREADS:-}" ] && omp=(-x OMP_NUM_THREADS)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# --bind-to none: every orted binds its host's ranks from core 0 up, and the hosts share this
# machine's cores, so the ranks of different hosts would share cores (rank 0 of each host on
# core 0: each waits a scheduler slice, 4 ms, for the other in every exchange).
# mpi_yield_when_idle 1: for the same reason no orted sees its host oversubscribed (2 ranks on
# a host of 2 cores) while all the hosts' ranks together are (4 on this machine's 2): waiting
# ranks must yield the core, as mpirun makes them on one oversubscribed host (without it FSDP
# at 2 hosts x 2 ranks took 300 ms a step here instead of 50).
# -x: mpirun's environment for the ranks is the orteds', which the agent starts from mpirun's own
exec timeout -k 10 "${ZTH_MPI_TIMEOUT:-300}" mpirun --hostfile "$ZTH_HOSTFILE" --oversubscribe --bind-to none \
  --mca mpi_yield_when_idle 1 --mca plm_rsh_agent "$dir/agent.sh" --mca plm_rsh_no_tree_spawn 1 \
  --mca pml ob1 --mca btl "${ZTH_BTL:-tcp,self}" --mca osc '^ucx' --mca mtl '^ofi,psm,psm2' \
  --mca btl_tcp_if_include "$ZTH_SUBNET.0/24" --mca oob_tcp_if_include "$ZTH_SUBNET.0/24" \
  "${omp[@]}" "$@"
