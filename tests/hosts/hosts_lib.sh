# shellcheck shell=bash
# The hosts harness (sourced by bash scripts): N separate network hosts on this machine, and
# mpirun across them.
#
#   . tests/hosts/hosts_lib.sh
#   hosts_up 2 2            # 2 hosts, 2 slots each (exit 77 with a notice where it cannot)
#   hosts_mpirun -np 4 build/tests/test_fsdp
#   hosts_netem 2 delay 10ms loss 1%    # faults on host 2's link (rate 1gbit; clear)
#   hosts_link 2 down                   # host 2's link pulled out (up: put back)
#   hosts_down              # also run on exit, by the trap hosts_up sets
#
# Each host is a network namespace (`ip netns`) with one address, 10.213.X.i/24, on a veth
# pair whose other end is on a bridge in the root namespace; the bridge holds 10.213.X.254,
# which is where mpirun (in the root namespace) listens for the orteds. The hostfile names
# the hosts by their addresses; mpirun starts an orted on each through tests/hosts/agent.sh
# (plm_rsh_agent, in place of ssh), which runs it inside the host's namespace with a hostname
# of its own (zth-h1, zth-h2, ...). Ranks on different hosts then talk only over TCP on the
# bridge's subnet: btl tcp,self (no vader: no shared memory, no CMA), pml ob1 (not UCX, whose
# shared-memory transports would cross namespaces), osc without UCX, and the out-of-band and
# TCP byte transfer layers restricted to that subnet. They still share the machine's
# filesystem and /dev/shm, which nothing of MPI's uses across hosts once OpenMPI treats each
# namespace as its own node (each has its own orted: MPI_Comm_split_type(SHARED) gives one
# group per host; tests/hosts/hosts_test.sh checks it with hosts_probe).
#
# Names are unique to the run (zth<pid in hex>: the bridge zth…br, the namespaces zth…h1..hN,
# the veths zth…v1../zth…p1..), and the subnet's third number is taken with a lock folder in
# /tmp (zth-subnet-X), so runs at the same time do not clash. hosts_down kills what is left
# in the namespaces (orteds and ranks of a failed run), deletes them and the bridge and frees
# the subnet; hosts_up also removes what a run that was killed (SIGKILL: no trap) left.
# Environment: see hosts_mpirun.sh (ZTH_BTL, ZTH_MPI_TIMEOUT).

ZTH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
zth_prefix=""
zth_subnet=""
zth_nhosts=0
zth_work=""

# skip NOTICE: the harness cannot run here (the ctest entry counts 77 as skipped)
zth_skip() {
  echo "SKIP hosts: $*"
  exit 77
}

# zth_alive PID: the process runs (a zombie does not: a container's init may not reap orphans)
zth_alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

# Remove the namespaces (and what runs in them), bridges, subnet locks and work folders of
# harness runs whose shell is gone (killed by SIGKILL: no trap ran).
zth_reap_stale() {
  local ns pid p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^zth[0-9a-f]+h[0-9]+$'); do
    p=${ns%h*}
    pid=$((16#${p#zth}))
    if ! zth_alive "$pid"; then
      ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
      ip netns del "$ns" 2>/dev/null
    fi
  done
  for p in $(ip -o link show type bridge 2>/dev/null | awk -F': ' '{print $2}' | grep -E '^zth[0-9a-f]+br$'); do
    pid=$((16#$(echo "$p" | sed 's/^zth//; s/br$//')))
    zth_alive "$pid" || ip link del "$p" 2>/dev/null
  done
  for p in /tmp/zth-subnet-* /tmp/zth-hosts.*; do
    [ -f "$p/pid" ] || continue
    pid=$(cat "$p/pid" 2>/dev/null)
    [ -n "$pid" ] && ! zth_alive "$pid" && rm -rf "$p"
  done
  true
}

# hosts_up N [SLOTS]: N hosts (1..9) with SLOTS slots each (default 1); sets zth_hostfile,
# zth_hosts (the addresses), zth_names (the hostnames), zth_local (a folder path that is each
# host's own on that host: a host-local disk; host i's is $zth_work/h$i from here), and an EXIT trap that runs hosts_down
# (and then the EXIT trap the caller had set). Exits 77 where namespaces
# cannot be made.
hosts_up() {
  local n=$1 slots=${2:-1} i x
  [ "$(id -u)" -eq 0 ] || zth_skip "not root: network namespaces need root (ip netns add)"
  command -v ip >/dev/null 2>&1 || zth_skip "no ip command (Debian: apt-get install iproute2)"
  command -v unshare >/dev/null 2>&1 || zth_skip "no unshare command (util-linux)"
  command -v mpirun >/dev/null 2>&1 || zth_skip "no mpirun (OpenMPI)"
  zth_reap_stale
  zth_prefix=zth$(printf %x $$)
  # the caller's EXIT trap (check_lib.sh's removal of its scratch folder) runs after hosts_down
  if [ -z "${zth_trapped:-}" ]; then
    zth_prev_trap=""
    zth_trap_arg() { zth_prev_trap=${3:-}; }
    eval "zth_trap_arg $(trap -p EXIT)"
    trap 'hosts_down; eval "$zth_prev_trap"' EXIT
    zth_trapped=1
  fi
  trap 'exit 130' INT TERM
  # a free subnet 10.213.X.0/24: no route into it, and its lock folder made by this run
  for x in $(seq $(( $$ % 200 + 20 )) 254) $(seq 20 254); do
    ip -4 route show to match "10.213.$x.1" | grep -q "10.213.$x\." && continue
    ip -4 addr show | grep -q "inet 10.213.$x\." && continue
    if mkdir "/tmp/zth-subnet-$x" 2>/dev/null; then
      echo $$ >"/tmp/zth-subnet-$x/pid"
      zth_subnet=10.213.$x
      break
    fi
  done
  [ -n "$zth_subnet" ] || zth_skip "no free subnet 10.213.X.0/24"
  zth_work=$(mktemp -d /tmp/zth-hosts.XXXXXX)
  echo $$ >"$zth_work/pid"
  if ! ip netns add "${zth_prefix}h0probe" 2>/dev/null; then
    zth_skip "cannot make a network namespace here (ip netns add failed: a container without CAP_SYS_ADMIN?)"
  fi
  ip netns del "${zth_prefix}h0probe"
  ip link add "${zth_prefix}br" type bridge || zth_skip "cannot make a bridge (ip link add type bridge failed)"
  ip addr add "$zth_subnet.254/24" dev "${zth_prefix}br"
  ip link set "${zth_prefix}br" up
  zth_hostfile=$zth_work/hostfile
  zth_local=$zth_work/local
  mkdir -p "$zth_local"
  : >"$zth_hostfile"
  : >"$zth_work/map"
  zth_hosts=()
  zth_names=()
  for ((i = 1; i <= n; i++)); do
    local ns=${zth_prefix}h$i
    ip netns add "$ns" || zth_skip "ip netns add $ns failed"
    zth_nhosts=$i
    ip link add "${zth_prefix}v$i" type veth peer name "${zth_prefix}p$i" || zth_skip "cannot make a veth pair"
    ip link set "${zth_prefix}v$i" master "${zth_prefix}br" up
    ip link set "${zth_prefix}p$i" netns "$ns"
    ip -n "$ns" addr add "$zth_subnet.$i/24" dev "${zth_prefix}p$i"
    ip -n "$ns" link set "${zth_prefix}p$i" up
    ip -n "$ns" link set lo up
    zth_hosts+=("$zth_subnet.$i")
    zth_names+=("zth-h$i")
    echo "$zth_subnet.$i slots=$slots" >>"$zth_hostfile"
    mkdir -p "$zth_work/h$i"
    echo "$zth_subnet.$i $ns zth-h$i $zth_work/h$i $zth_local" >>"$zth_work/map"
  done
  export ZTH_HOSTS_MAP=$zth_work/map ZTH_HOSTFILE=$zth_hostfile ZTH_SUBNET=$zth_subnet
  # the root namespace reaches every host (mpirun's out-of-band channel to the orteds)
  for ((i = 1; i <= n; i++)); do
    local ok=0 _
    for _ in 1 2 3 4 5 6 7 8 9 10; do
      # a refused connection is an answer: the host is there
      if timeout 2 bash -c "echo >/dev/tcp/$zth_subnet.$i/9" 2>&1 | grep -q refused; then
        ok=1
        break
      fi
      sleep 0.2
    done
    [ $ok -eq 1 ] || { echo "hosts: host $i ($zth_subnet.$i) does not answer over the bridge" >&2; return 1; }
  done
  echo "hosts: $n hosts up (${zth_hosts[*]}, $slots slot(s) each), namespaces ${zth_prefix}h1..h$n"
}

# hosts_mpirun ARGS...: mpirun over the hosts (hosts_mpirun.sh: the hostfile's slots, by slot
# unless ARGS say otherwise, the transports restricted to TCP on the bridge).
hosts_mpirun() { "$ZTH_DIR/hosts_mpirun.sh" "$@"; }

# hosts_netem HOST SPEC...: network faults on host HOST's link (1..N), as `tc netem` would
# put them, in words: `delay 10ms` (or `us`), `loss 1%`, `rate 1gbit` (tc's units), several at
# once (`delay 1ms loss 1%`), or `clear` (none: the clean link). Each applies once to every
# packet that crosses the host's link in one direction: delay and loss to the packets the host
# receives, the rate to those it sends; set on every host, a packet between two hosts is
# delayed once and dropped with the given chance once per crossing, and each direction is
# limited to the rate (as netem on each host's egress). This kernel may have no netem
# (CONFIG_NET_SCH_NETEM): the rate is tc's tbf on the host's end of the veth pair; the loss an
# iptables rule in the host's namespace (raw PREROUTING, before the host's stack: a lost
# packet is one the sender's TCP must retransmit; `-m statistic --mode random`); the delay the
# same hook queueing the packets (`-j NFQUEUE`) to zth_delay (tests/hosts/zth_delay.c: each
# packet accepted DELAY after it arrived, in order). Needs `iptables` for loss and delay and
# zth_delay for delay (ZTH_DELAY: its path; else build/tests/zth_delay next to the harness);
# returns 2 with a notice where they are missing.
hosts_netem() {
  local h=$1 ns=${zth_prefix}h$1 dev=${zth_prefix}p$1 delay="" loss="" rate="" v
  shift
  [ -n "$zth_prefix" ] && [ "$h" -ge 1 ] && [ "$h" -le "$zth_nhosts" ] || { echo "hosts_netem: no host $h" >&2; return 1; }
  while [ $# -gt 0 ]; do
    case $1 in
      clear) ;;
      delay) delay=$2; shift ;;
      loss) loss=${2%\%}; shift ;;
      rate) rate=$2; shift ;;
      *) echo "hosts_netem: unknown '$1' (delay D, loss P%, rate R, clear)" >&2; return 1 ;;
    esac
    shift
  done
  # clear what was set
  if [ -f "$zth_work/delay.$h.pid" ]; then
    kill "$(cat "$zth_work/delay.$h.pid")" 2>/dev/null
    rm -f "$zth_work/delay.$h.pid"
  fi
  ip netns exec "$ns" iptables -t raw -F PREROUTING 2>/dev/null
  tc -n "$ns" qdisc del dev "$dev" root 2>/dev/null
  if [ -n "$rate" ]; then
    # burst: at least one GSO packet (64 KiB) and 1 ms at the rate; a queue of 100 ms
    tc -n "$ns" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms || return 1
  fi
  if [ -n "$delay$loss" ]; then
    command -v iptables >/dev/null 2>&1 || { echo "hosts_netem: no iptables (Debian: apt-get install iptables): no loss or delay" >&2; return 2; }
    if [ -n "$loss" ]; then
      v=$(awk -v p="$loss" 'BEGIN { printf "%.6f", p / 100 }')
      ip netns exec "$ns" iptables -t raw -A PREROUTING -i "$dev" -m statistic --mode random --probability "$v" -j DROP ||
        return 1
    fi
    if [ -n "$delay" ]; then
      local bin=${ZTH_DELAY:-$ZTH_DIR/../../build/tests/zth_delay} us
      [ -x "$bin" ] || { echo "hosts_netem: no zth_delay ($bin; ZTH_DELAY names it): no delay" >&2; return 2; }
      case $delay in
        *us) us=${delay%us} ;;
        *ms) us=$(awk -v d="${delay%ms}" 'BEGIN { printf "%d", d * 1000 }') ;;
        *) echo "hosts_netem: delay '$delay': give ms or us" >&2; return 1 ;;
      esac
      ip netns exec "$ns" "$bin" "$h" "$us" </dev/null >>"$zth_work/delay.$h.log" 2>&1 &
      echo $! >"$zth_work/delay.$h.pid"
      sleep 0.2
      ip netns exec "$ns" iptables -t raw -A PREROUTING -i "$dev" -j NFQUEUE --queue-num "$h" --queue-bypass || return 1
    fi
  fi
  true
}

# hosts_link HOST down|up: host HOST's cable pulled out or put back (its veth end on the
# bridge set down or up: the host can reach no other host, nor mpirun, until it is up again).
# up waits until the host answers over the bridge again.
hosts_link() {
  local h=$1 _
  ip link set "${zth_prefix}v$h" "$2" || return 1
  if [ "$2" = up ]; then
    for _ in $(seq 50); do
      timeout 1 bash -c "echo >/dev/tcp/$zth_subnet.$h/9" 2>&1 | grep -q refused && return 0
      sleep 0.1
    done
    echo "hosts_link: host $h does not answer after up" >&2
    return 1
  fi
}

# hosts_down: kill what is left in the hosts, delete them, the bridge, the subnet lock and the
# harness's work folder. Safe to call twice; hosts_up may follow (another set of hosts).
hosts_down() {
  local i ns
  [ -n "$zth_prefix" ] || return 0
  for ((i = 1; i <= zth_nhosts; i++)); do
    ns=${zth_prefix}h$i
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
  done
  for ((i = 1; i <= zth_nhosts; i++)); do
    ip netns del "${zth_prefix}h$i" 2>/dev/null
  done
  ip netns del "${zth_prefix}h0probe" 2>/dev/null
  ip link del "${zth_prefix}br" 2>/dev/null
  [ -n "$zth_subnet" ] && rm -rf "/tmp/zth-subnet-${zth_subnet##*.}"
  [ -n "$zth_work" ] && rm -rf "$zth_work"
  zth_prefix=""
  zth_nhosts=0
  true
}
