#!/usr/bin/env bash
# FSDP with every state on disk (ZeRO-Infinity: zt train --shard full --offload-states disk),
# in one go: a GPT-2 at 2 ranks (mpirun, one thread each), each rank's shards, gradient shards
# and AdamW state in its own disk store, blocks recomputed (--recompute full), inside one memory
# cgroup of LIMIT for both ranks (bench/mem_limit.sh: the kernel enforces it, page cache
# included), the allocator's cache bounded to 64 MiB per rank. B=8 (4 rows per rank), T=256, --metrics. One JSON line to
# bench/results/fsdp_states.jsonl: the step times, model GFLOP/s (6NBT + 12LTdBT), the cgroup's
# peak and OOM kills, each rank's peak RSS, rank 0's disk bytes read/written per step.
# usage: bench/fsdp_states.sh [build dir (default build)] [model (default gpt2-1558m)] [limit (default 4G)] [steps (default 2)]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
model=${2:-gpt2-1558m}
lim=${3:-4G}
steps=${4:-2}
zt="$build/zt"
[ -x "$zt" ] || { echo "bench/fsdp_states.sh: $zt not found; run make first" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "bench/fsdp_states.sh: needs mpirun" >&2; exit 2; }
dir=${ZT_OFFLOAD_DIR:-${TMPDIR:-/tmp}}/zt_fsdp_states_bench
mkdir -p "$dir"
out=bench/results/fsdp_states.jsonl
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
m="$dir/run.jsonl" log="$dir/run.log"
rm -f "$m"
# the allocator's cache of freed blocks (ZT_ALLOC_CACHE_MB, 1 GiB by default, per process) bounded:
# without --mem-limit's planner (OffloadModel only) nothing else bounds it
bench/mem_limit.sh "$lim" -- mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 -x ZT_ALLOC_CACHE_MB=64 "$zt" train --model "$model" \
  --batch 8 --seq 256 --steps "$steps" --eval-every 0 --eval-batches 1 --sample-len 0 --log-every 1 --threads 1 \
  --shard full --offload-states disk --recompute full --offload-dir "$dir" --metrics "$m" > "$log" 2>&1 || true
tail -4 "$log" >&2
python3 - "$model" "$lim" "$m" "$log" "$out" <<'PY'
import json, re, sys
model, lim, mpath, log, out = sys.argv[1:6]
text = open(log).read()
steps = [json.loads(l) for l in open(mpath)] if open(mpath).read().strip() else []
cg = re.findall(r'\{"mem_limit":\{[^}]*\}\}', text)
L, d = {"gpt2-774m": (36, 1280), "gpt2-1558m": (48, 1600), "gpt2-tiny": (4, 128)}[model]
m = re.search(r"(\d+) parameters", text)
r = {"run": "fsdp-full-disk-2ranks", "model": model, "limit": lim, "steps": len(steps)}
if m: r["params"] = int(m.group(1))
if steps:
    r["step_ms_all"] = [s["step_ms"] for s in steps]
    r["losses"] = [s["loss"] for s in steps]
    last = steps[-1]
    r["step_ms"] = last["step_ms"]
    if "params" in r:
        flops = 6 * r["params"] * 8 * 256 + 12 * L * 256 * d * 8 * 256
        r["gflops"] = round(flops / (last["step_ms"] / 1e3) / 1e9, 1)
    if last.get("io"):
        r["rank0_read_bytes_per_step"] = last["io"]["read_bytes"]
        r["rank0_write_bytes_per_step"] = last["io"]["write_bytes"]
    ranks = last.get("ranks") or []
    if ranks: r["peak_rss_per_rank"] = [x.get("peak_rss") for x in ranks]
    r["rank0_peak_rss"] = max(s["peak_rss"] for s in steps)
if cg: r["cgroup"] = json.loads(cg[-1])["mem_limit"]
with open(out, "a") as f: f.write(json.dumps(r) + "\n")
print(json.dumps(r))
PY
