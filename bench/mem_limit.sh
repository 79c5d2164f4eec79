#!/usr/bin/env bash
# bench/mem_limit.sh LIMIT -- CMD...: run CMD inside a memory cgroup of LIMIT bytes (e.g. 4G,
# 512M; IEC units) so that "fits in LIMIT" is enforced by the kernel, page cache included, not
# claimed. cgroup v2 (memory.max, swap off) or v1 (memory.limit_in_bytes and
# memory.memsw.limit_in_bytes), whichever this machine mounts; needs root. The cgroup is made
# under the caller's own memory cgroup and removed afterwards. On stderr at the end, one JSON
# line: {"mem_limit":{"limit":B,"peak":B,"oom_kills":N,"rc":RC,"cgroup":"v1|v2"}} (peak: the
# cgroup's high-water mark, page cache included). Exit status: CMD's (137 when the kernel
# killed it for memory). Exit 77 (skip) when no memory cgroup can be made here.
set -euo pipefail
if [ $# -lt 3 ] || [ "$2" != "--" ]; then
  echo "usage: $0 LIMIT -- CMD [ARGS...]   (LIMIT in bytes, or with K/M/G: 4G)" >&2
  exit 2
fi
limit=$(numfmt --from=iec "${1%B}" 2>/dev/null) || { echo "$0: '$1' is not a size (e.g. 4G, 512M)" >&2; exit 2; }
shift 2
if [ "$(id -u)" -ne 0 ]; then echo "$0: making a cgroup needs root" >&2; exit 77; fi

v2_root=""
if [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/cgroup.controllers; then
  v2_root=/sys/fs/cgroup
elif [ -f /sys/fs/cgroup/unified/cgroup.controllers ] && grep -qw memory /sys/fs/cgroup/unified/cgroup.controllers; then
  v2_root=/sys/fs/cgroup/unified
fi
if [ -n "$v2_root" ]; then
  kind=v2
  parent=$v2_root$(sed -n 's/^0:://p' /proc/self/cgroup)
  cg=$parent/zt_mem_limit_$$
  mkdir "$cg" 2>/dev/null || { echo "$0: cannot make a cgroup in $parent" >&2; exit 77; }
  echo "$limit" > "$cg/memory.max"
  [ -f "$cg/memory.swap.max" ] && echo 0 > "$cg/memory.swap.max"
elif [ -d /sys/fs/cgroup/memory ]; then
  kind=v1
  parent=/sys/fs/cgroup/memory$(sed -n 's/^[0-9]*:memory://p' /proc/self/cgroup)
  cg=$parent/zt_mem_limit_$$
  mkdir "$cg" 2>/dev/null || { echo "$0: cannot make a cgroup in $parent" >&2; exit 77; }
  echo "$limit" > "$cg/memory.limit_in_bytes"
  # swap counts too where the kernel accounts it (no swap: the same limit)
  [ -f "$cg/memory.memsw.limit_in_bytes" ] && echo "$limit" > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
else
  echo "$0: no memory cgroup (v1 or v2) is mounted here" >&2
  exit 77
fi
cleanup() { rmdir "$cg" 2>/dev/null || true; }
trap cleanup EXIT

# CMD runs in a child shell that moves itself into the cgroup before exec, so nothing of it
# runs outside the limit
set +e
bash -c 'echo $$ > "$1/cgroup.procs" && shift && exec "$@"' mem_limit "$cg" "$@"
rc=$?
set -e
if [ "$kind" = v2 ]; then
  peak=$(cat "$cg/memory.peak" 2>/dev/null || echo -1)
  kills=$(sed -n 's/^oom_kill //p' "$cg/memory.events" 2>/dev/null || echo 0)
else
  peak=$(cat "$cg/memory.max_usage_in_bytes")
  kills=$(sed -n 's/^oom_kill //p' "$cg/memory.oom_control" 2>/dev/null || echo 0)
fi
printf '{"mem_limit":{"limit":%s,"peak":%s,"oom_kills":%s,"rc":%s,"cgroup":"%s"}}\n' "$limit" "$peak" "${kills:-0}" "$rc" "$kind" >&2
exit "$rc"
