#!/bin/sh
# OpenMPI's launcher agent (plm_rsh_agent) for the hosts harness (tests/hosts/hosts_lib.sh):
# mpirun runs `agent.sh HOST COMMAND...` as it would run `ssh HOST COMMAND...`. HOST is one of
# the harness's addresses; the map file named by ZTH_HOSTS_MAP (lines "ADDRESS NAMESPACE
# HOSTNAME LOCAL MOUNT") says which network namespace holds it. The command (OpenMPI's orted, with the
# environment settings mpirun puts before it, as one shell line, as ssh would give it to the
# remote shell) runs inside that namespace, in a UTS namespace of its own whose hostname is
# the host's name, so that MPI_Get_processor_name and the session folders tell hosts apart,
# and in a mount namespace of its own where the folder MOUNT is the host's folder LOCAL: a
# path that every host has, each its own (a host-local disk), for host-local save folders.
map=${ZTH_HOSTS_MAP:-}
if [ -z "$map" ] || [ ! -r "$map" ]; then
  echo "agent.sh: ZTH_HOSTS_MAP does not name a readable map file (run through tests/hosts/hosts_lib.sh)" >&2
  exit 255
fi
# OpenMPI may put ssh-style options before the host (none are meaningful here)
while [ $# -gt 0 ]; do
  case $1 in
  -*) shift ;;
  *) break ;;
  esac
done
host=$1
shift
line=$(awk -v h="$host" '$1 == h || $3 == h { print $2, $3, $4, $5; exit }' "$map")
if [ -z "$line" ]; then
  echo "agent.sh: host $host is not in $map" >&2
  exit 255
fi
set -- $line "$@"
ns=$1
shift
exec ip netns exec "$ns" unshare --uts --mount --propagation private /bin/sh -c \
  'hostname "$1" && mount --bind "$2" "$3" && shift 3 && eval "$*"' agent "$@"
