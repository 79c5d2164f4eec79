#!/usr/bin/env bash
# Training state on disk (issues 16 and 27), in one go: the disk's own sequential direct-I/O
# bandwidth (bench_disk's single-threaded 8 MiB O_DIRECT reference and the store's engine), then
# GPT-2 (the default):
#   1. gpt2-774m in RAM, plain training, four steps (the reference model GFLOP/s);
#   2. gpt2-774m with every state on disk (--offload-states disk --mem-limit 4G), inside a 4 GiB
#      memory cgroup (bench/mem_limit.sh: the kernel enforces it, page cache included);
#   3. gpt2-1558m the same, five steps;
# or, with --llama (issue 27), the Llama family:
#   1. llama3.2-1b's shape with 4 of its 16 layers (--layers 4) in RAM, plain training, four
#      steps: the reference GFLOP/s. The whole 1.24B model in RAM needs ~20 GB of states (16 bytes
#      a parameter), more than a shared 24 GiB machine holds safely; 4 layers have the same
#      widths, so the same GEMM shapes, and GFLOP/s are a per-FLOP rate; then the same with 2
#      layers, and through the two the 16-layer step extrapolated (the head's and embeddings'
#      share of the FLOPs is 52% at 4 layers, 21% at 16: a second reference with 16 layers' mix);
#   2. llama3.2-1b (1.24B) with every state on disk, inside a 4 GiB memory cgroup, six steps;
#   3. only where 2. made no step (before OffloadModel's chunked updates the planner refused 4G
#      for it): the same at ZT_BENCH_FALLBACK_LIMIT (5G) in a cgroup of that size.
# The runs on disk run the activation trial (steps 3 and 4: every slice's activations offloaded,
# then recomputed; from step 5 each slice's measured faster way).
# B=8, T=256, 2 threads, zt train with --metrics; a run's step time is the median of its steps
# after the first two that are not trial steps (the trial steps' times, per slice too, and the
# choice are reported beside). Model GFLOP/s by 6NBT + 12LTdBT. Before each run the script waits
# (polling every 30 s, at most ZT_BENCH_LOAD_WAIT s, default 600) for the 1-minute load average
# to fall below ZT_BENCH_MAX_LOAD (default 2.5), and records the load before and after. Per run
# one JSON line to the results file (bench/results/offload_states.jsonl; with --llama
# bench/results/llama_mem_limit.jsonl): step time, GFLOP/s and its ratio to (1),
# peak RSS, the cgroup's peak, disk bytes read/written per step, I/O busy time, the fraction of
# I/O time hidden behind compute (1 - (step - compute-bound step) / I/O time, compute-bound step:
# the plain run's step time scaled by FLOPs), and the physical floor bytes / bandwidth.
# usage: bench/offload_states.sh [build dir (default build)] [--llama] [--quick: small models,
#        for a check]
# env: ZT_OFFLOAD_DIR (the store's folder; else $TMPDIR or /tmp: 1.5B needs ~25 GiB free there),
#      ZT_BENCH_STEPS (the runs on disk's steps, default 6 and 5; with --llama 6)
set -euo pipefail
cd "$(dirname "$0")/.."
build=build llama=0 quick=0
for a in "$@"; do
  case "$a" in
    --llama) llama=1 ;;
    --quick) quick=1 ;;
    -*) echo "bench/offload_states.sh: unknown option $a (--llama, --quick)" >&2; exit 2 ;;
    *) build=$a ;;
  esac
done
zt="$build/zt"
[ -x "$zt" ] || { echo "bench/offload_states.sh: $zt not found; run make first" >&2; exit 2; }
command -v python3 >/dev/null || { echo "bench/offload_states.sh: needs python3 for the summary" >&2; exit 2; }
dir=${ZT_OFFLOAD_DIR:-${TMPDIR:-/tmp}}/zt_offload_states_bench
mkdir -p "$dir"
out=bench/results/offload_states.jsonl
# a run: name model steps limit extra-args (the reference, plain in RAM, is the first)
lim=4G cfg=(--batch 8 --seq 256)
runs=("plain-774m gpt2-774m 4 -" "disk-774m gpt2-774m ${ZT_BENCH_STEPS:-6} $lim" "disk-1558m gpt2-1558m ${ZT_BENCH_STEPS:-5} $lim")
if [ $llama = 1 ]; then
  out=bench/results/llama_mem_limit.jsonl
  # the 4G run is the headline (its 1.0 GiB embedding updated in chunks: weight, grad and one
  # chunk's moments in RAM); only where it made no step, the same run at ZT_BENCH_FALLBACK_LIMIT
  # (5G), the trailing "?" running it only when the run before it made no step
  runs=("plain-llama3.2-1b-4l llama3.2-1b 4 - --layers 4" "plain-llama3.2-1b-2l llama3.2-1b 4 - --layers 2" "disk-llama3.2-1b llama3.2-1b ${ZT_BENCH_STEPS:-6} $lim"
        "disk-llama3.2-1b-${ZT_BENCH_FALLBACK_LIMIT:-5G} llama3.2-1b ${ZT_BENCH_STEPS:-6} ${ZT_BENCH_FALLBACK_LIMIT:-5G}?")
fi
if [ $quick = 1 ]; then
  out=${TMPDIR:-/tmp}/zt_offload_states_quick.jsonl
  lim=60M cfg=(--batch 8 --seq 128) # 60M: activation offload, and the trial
  runs=("plain-tiny gpt2-tiny 4 -" "disk-tiny gpt2-tiny 6 $lim")
  [ $llama = 1 ] && runs=("plain-tiny-2l llama-tiny 4 - --layers 2" "plain-tiny-1l llama-tiny 4 - --layers 1" "disk-tiny llama-tiny 6 20M" "disk-tiny-60m llama-tiny 6 60M?")
fi
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
common=(train "${cfg[@]}" --eval-every 0 --eval-batches 1 --sample-len 0 --log-every 1 --threads "$OMP_NUM_THREADS")
: > "$out"
load1() { cut -d' ' -f1 /proc/loadavg; }
wait_load() { # until the 1-minute load is under ZT_BENCH_MAX_LOAD, at most ZT_BENCH_LOAD_WAIT s
  local max=${ZT_BENCH_MAX_LOAD:-2.5} left=${ZT_BENCH_LOAD_WAIT:-600}
  while awk -v l="$(load1)" -v m="$max" 'BEGIN{exit !(l >= m)}' && [ "$left" -gt 0 ]; do
    echo "bench/offload_states.sh: load $(load1) >= $max, waiting (${left} s left)" >&2
    sleep 30; left=$((left - 30))
  done
}
wait_load
"$build/bench/bench_disk" "$dir" 1024 128 > "$dir/disk.jsonl"
python3 - "$dir/disk.jsonl" >> "$out" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip().startswith("{")]
ref = [r for r in rows if r.get("engine") == "reference" or r.get("kind") == "reference"]
print(json.dumps({"run": "disk", "rows": rows}))
PY
run() { # name model steps limit|- [extra zt args...]
  local name=$1 model=$2 steps=$3 limit=$4; shift 4
  local extra=("$@")
  [ "$limit" = - ] && limit=
  local m="$dir/$name.jsonl" log="$dir/$name.log"
  rm -f "$m"
  wait_load
  local load0; load0=$(cut -d' ' -f1-3 /proc/loadavg)
  if [ -n "$limit" ]; then
    bench/mem_limit.sh "$limit" -- "$zt" "${common[@]}" --model "$model" "${extra[@]}" --steps "$steps" --metrics "$m" \
      --offload-states disk --mem-limit "$limit" --offload-dir "$dir" > "$log" 2>&1 || true
  else
    "$zt" "${common[@]}" --model "$model" "${extra[@]}" --steps "$steps" --metrics "$m" > "$log" 2>&1 || true
  fi
  local load1_; load1_=$(cut -d' ' -f1-3 /proc/loadavg)
  touch "$m"
  tail -3 "$log" >&2
  python3 - "$name" "$model" "$m" "$log" "$out" "$limit" "$load0" "$load1_" "$OMP_NUM_THREADS" "${extra[@]}" <<'PY'
import json, re, statistics, sys
name, model, mpath, log, out, limit, load0, load1, threads = sys.argv[1:10]
extra = sys.argv[10:]
steps = [json.loads(l) for l in open(mpath) if l.strip()]
text = open(log).read()
cg = re.findall(r'\{"mem_limit":\{[^}]*\}\}', text)
plan = [p for p in re.findall(r"memory plan: .*", text) if "predicted peak RAM" in p]
r = {"run": name, "model": model, "limit": limit or None, "steps": len(steps), "threads": int(threads),
     "load_before": [float(x) for x in load0.split()], "load_after": [float(x) for x in load1.split()]}
if extra: r["args"] = extra
if not steps:  # failed: keep what the log says
    r["failed"] = True
    r["log_tail"] = text.strip().splitlines()[-8:]
if steps:
    # the steady state: past the first two (the first with empty caches, the second making AdamW's
    # moments rather than reading them) and the trial's; the median of the steps after the first
    # where the run is too short for that
    later = [s for s in steps[2:] if "act_trial" not in s] or steps[1:] or steps
    r["step_ms"] = statistics.median(s["step_ms"] for s in later)
    r["step_ms_all"] = [s["step_ms"] for s in steps]
    r["tokens_per_s"] = statistics.median(s["tokens_per_s"] for s in later)
    r["peak_rss"] = max(s["peak_rss"] for s in steps)
    for s in steps:
        if "act_trial" in s: r["trial_" + s["act_trial"] + "_step_ms"] = s["step_ms"]
        if "act_choice" in s: r["act_choice"] = s["act_choice"]
        if "act_offload_bytes" in s: r.setdefault("act_offload_bytes_all", []).append(s["act_offload_bytes"])
    sl = re.findall(r"slice (\d+) \((?:blocks? [0-9-]+)\): ([0-9.]+) s offloaded, ([0-9.]+) s recomputed: (\w+)", text)
    if sl: r["trial_slices"] = [{"slice": int(a), "offload_s": float(b), "recompute_s": float(c), "way": d} for a, b, c, d in sl]
    io = [s.get("io") for s in later if s.get("io")]
    if io:
        for k in ("read_bytes", "write_bytes", "read_ms", "write_ms"):
            r["io_" + k] = statistics.median(x[k] for x in io)
m = re.search(r"([0-9.]+) s putting saves in forward, ([0-9.]+) s waiting for loads", text)
if m: r["act_put_s"], r["act_wait_s"] = float(m.group(1)), float(m.group(2))
m = re.search(r"computing thread's time: ([0-9.]+) s waiting for slices to load, ([0-9.]+) s in updates, ([0-9.]+) s in evictions", text)
if m: r["load_wait_s"], r["update_s"], r["evict_s"] = (float(m.group(i)) for i in (1, 2, 3))
m = re.search(r"of the updates ([0-9.]+) s at steps' ends, ([0-9.]+) s waiting for moments, ([0-9.]+) s in AdamW", text)
if m: r["update_end_s"], r["update_read_wait_s"], r["update_adamw_s"] = (float(m.group(i)) for i in (1, 2, 3))
m = re.search(r"(\d+) parameters", text)
if m: r["params"] = int(m.group(1))
if cg: r["cgroup"] = json.loads(cg[-1])["mem_limit"]
if plan: r["plan"] = plan[-1]
with open(out, "a") as f: f.write(json.dumps(r) + "\n")
print(json.dumps(r))
PY
}
names=() prev_ok=1
for r in "${runs[@]}"; do
  read -r -a a <<< "$r"
  if [ "${a[3]: -1}" = "?" ]; then # only when the run before made no step
    [ $prev_ok = 1 ] && continue
    a[3]=${a[3]%\?}
  fi
  run "${a[@]}"
  names+=("${a[0]}")
  prev_ok=0; [ -s "$dir/${a[0]}.jsonl" ] && prev_ok=1
done
python3 - "$out" "${cfg[1]}" "${cfg[3]}" "${names[@]}" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
disk = next(r for r in rows if r["run"] == "disk")
ref = [x for x in disk["rows"] if x.get("mode") == "reference"]
bw_r = max((x.get("read_gbps", 0) for x in ref), default=0) * 1e9
bw_w = max((x.get("write_gbps", 0) for x in ref), default=0) * 1e9
by = {r["run"]: r for r in rows}
B, T, names = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
def cfg(r):  # the presets' shapes: (layers, dim), --layers N given overriding the layers
    L, d = {"gpt2-774m": (36, 1280), "gpt2-1558m": (48, 1600), "gpt2-tiny": (4, 128),
            "llama3.2-1b": (16, 2048), "llama-tiny": (4, 128)}[r["model"]]
    a = r.get("args", [])
    if "--layers" in a: L = int(a[a.index("--layers") + 1])
    return L, d
def flops(r):
    L, d = cfg(r)
    return 6 * r["params"] * B * T + 12 * L * T * d * B * T
plain = by.get(names[0])
for name in names:
    r = by.get(name)
    if not r or "step_ms" not in r: 
        s = {"summary": name, "failed": True}
        if r:
            s.update({k: r[k] for k in ("model", "limit", "load_before") if k in r})
            if "cgroup" in r: s["cgroup_peak"] = r["cgroup"]["peak"]; s["oom_kills"] = r["cgroup"]["oom_kills"]; s["rc"] = r["cgroup"]["rc"]
            err = [l for l in r.get("log_tail", []) if l.startswith("zt ")]
            s["error"] = (err or r.get("log_tail", [""]))[-1]
        print(json.dumps(s))
        with open(sys.argv[1], "a") as f: f.write(json.dumps(s) + "\n")
        continue
    s = {"summary": name, "model": r["model"], "step_s": round(r["step_ms"] / 1e3, 2),
         "gflops": round(flops(r) / (r["step_ms"] / 1e3) / 1e9, 1), "peak_rss": r["peak_rss"],
         "params": r["params"], "flops_per_step": flops(r), "load_before": r.get("load_before"),
         "load_after": r.get("load_after")}
    if "args" in r: s["args"] = r["args"]
    if plain and "step_ms" in plain:
        s["ratio_to_" + names[0].replace("-", "_")] = round(s["gflops"] / (flops(plain) / (plain["step_ms"] / 1e3) / 1e9), 3)
    if "cgroup" in r: s["cgroup_peak"] = r["cgroup"]["peak"]; s["oom_kills"] = r["cgroup"]["oom_kills"]
    for k in ("act_put_s", "act_wait_s", "load_wait_s", "update_s", "evict_s"):  # whole run (all steps)
        if k in r: s["run_" + k] = r[k]
    for k in ("trial_offload_step_ms", "trial_recompute_step_ms"):
        if k in r: s[k.replace("_ms", "_s")] = round(r[k] / 1e3, 2)
    if "act_choice" in r:
        s["act_choice"] = r["act_choice"]
        s["recomputed_slices"] = sum(1 for x in r.get("trial_slices", []) if x["way"] == "recompute")
    m = re.search(r"predicted peak RAM ([0-9.]+) (GiB|MiB)", r.get("plan", ""))
    if m: s["predicted_peak"] = round(float(m.group(1)) * (2**30 if m.group(2) == "GiB" else 2**20))
    if "io_read_bytes" in r:
        s["read_bytes_per_step"] = r["io_read_bytes"]; s["write_bytes_per_step"] = r["io_write_bytes"]
        s["io_busy_s"] = round((r["io_read_ms"] + r["io_write_ms"]) / 1e3, 2)
        if bw_r and bw_w:
            s["io_floor_s"] = round(r["io_read_bytes"] / bw_r + r["io_write_bytes"] / bw_w, 2)
        if plain and "step_ms" in plain:
            compute = plain["step_ms"] / 1e3 * flops(r) / flops(plain)  # the step if I/O cost nothing
            io = s["io_busy_s"]
            s["compute_bound_s"] = round(compute, 2)
            s["io_hidden"] = round(max(0.0, min(1.0, 1 - (r["step_ms"] / 1e3 - compute) / io)), 3) if io > 0 else None
    print(json.dumps(s))
    with open(sys.argv[1], "a") as f: f.write(json.dumps(s) + "\n")
# with plain runs of one model at two depths (--layers), the full depth's plain step by a line
# through them (a step = a fixed part, the embeddings and the head, + a part per block): the
# in-RAM reference extrapolated to the depth the runs on disk have, and their ratio to it
pl = [by[n] for n in names if n in by and not by[n].get("limit") and "step_ms" in by[n] and "--layers" in by[n].get("args", [])]
if len(pl) >= 2 and pl[0]["model"] == pl[1]["model"]:
    (L0, _), (L1, _) = cfg(pl[0]), cfg(pl[1])
    full = {"llama3.2-1b": 16, "gpt2-774m": 36, "gpt2-1558m": 48, "llama-tiny": 4, "gpt2-tiny": 4}[pl[0]["model"]]
    per = (pl[0]["step_ms"] - pl[1]["step_ms"]) / (L0 - L1)
    step = pl[0]["step_ms"] + per * (full - L0)
    disk = [by[n] for n in names if n in by and by[n].get("limit") and "step_ms" in by[n] and by[n]["model"] == pl[0]["model"]]
    fl = flops(disk[0]) if disk else None
    e = {"summary": "plain-extrapolated-%dl" % full, "model": pl[0]["model"], "from": [r["run"] for r in pl[:2]],
         "block_step_s": round(per / 1e3, 3), "fixed_step_s": round((pl[0]["step_ms"] - per * L0) / 1e3, 2),
         "step_s": round(step / 1e3, 2)}
    if fl:
        e["gflops"] = round(fl / (step / 1e3) / 1e9, 1)
        e["ratios"] = {r["run"]: round(step / r["step_ms"], 3) for r in disk}
    print(json.dumps(e))
    with open(sys.argv[1], "a") as f: f.write(json.dumps(e) + "\n")
PY
echo "bench/offload_states.sh: results in $out" >&2
