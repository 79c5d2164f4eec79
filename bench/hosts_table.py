#!/usr/bin/env python3
"""The tables of bench/results/hosts.md from bench/results/hosts.jsonl (bench/hosts.sh's lines;
the newest line of each kind wins).  python3 bench/hosts_table.py [JSONL] > bench/results/hosts.md"""
import json
import sys

path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/hosts.jsonl"
comm, faults, down, steps, allsteps = {}, {}, {}, {}, {}
machine, dates, commits = "", set(), set()
for line in open(path):
    try:
        d = json.loads(line)
    except ValueError:
        continue
    if d.get("bench") not in ("comm", "hosts_faults", "hosts_step"):
        continue  # comm_experiment: a one-off (docs/hosts.md)
    machine = machine or d.get("machine", "")
    dates.add(d.get("date", "")[:16])
    commits.add(d.get("commit", ""))
    if d.get("bench") == "comm":
        comm[(d["setting"], d["place"], d["progress"])] = d
    elif d.get("bench") == "hosts_faults" and "step_ms" in d:
        faults[(d["layout"], d["fault"])] = d
    elif d.get("bench") == "hosts_faults":
        down[d["layout"]] = d
    elif d.get("bench") == "hosts_step":
        allsteps.setdefault((d["layout"], d["setting"], d["progress"]), []).append(d)

out = print
out("# Across hosts: measured costs\n")
dates.discard("")
commits.discard("")
out(f"bench/hosts.sh runs (commits {', '.join(sorted(commits))}; {min(dates)} to {max(dates)}, the newest line of")
out(f"each kind shown); {machine}. Every figure is a median (see each table);")
out("the machine was shared with other work, so differences of ~20% are noise. The \"hosts\" are")
out("network namespaces on one machine joined by veth pairs through a bridge: their links have no")
out("wire, the kernel copies the bytes, and every rank of every host shares the same 2 cores.\n")

OPS = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "sendrecv"]
order = ["one host", "clean", "delay 1ms", "delay 10ms", "loss 1%", "rate 1gbit", "rate 100mbit"]
keys = sorted(comm, key=lambda k: (order.index(k[0]) if k[0] in order else 99, k[2]))


def fmt(v):
    return f"{v:.1f}" if v < 10 else f"{v:.0f}"


def name(k):
    s = k[0] + (" (shared memory)" if k[1] == "one" else "")
    return s + (", progress thread" if k[2] else "")


if comm:
    out("## Collectives and point to point (2 ranks; bench_comm, median of 5 repetitions)\n")
    out("Latency: microseconds per call of 4 bytes (sendrecv: one way of a ping-pong).\n")
    out("| setting | " + " | ".join(OPS) + " | sendrecv 192 KiB |")
    out("| --- |" + " ---: |" * (len(OPS) + 1))
    for k in keys:
        o = comm[k]["ops"]
        out(f"| {name(k)} | " + " | ".join(fmt(o[op]["4"]["us"]) for op in OPS) +
            f" | {fmt(o['sendrecv']['196608']['us'])} |")
    out("\nBandwidth: bus bandwidth in MB/s at 4 MiB per rank (all-reduce: bytes x 2(n-1)/n / time;")
    out("gathers and scatters: x (n-1)/n; broadcast and one way of the ping-pong: bytes / time), and")
    out("at 64 KiB in brackets.\n")
    out("| setting | " + " | ".join(OPS) + " |")
    out("| --- |" + " ---: |" * len(OPS))
    for k in keys:
        o = comm[k]["ops"]
        out(f"| {name(k)} | " + " | ".join(f"{o[op]['4194304']['busbw_MBps']:.0f} ({o[op]['65536']['busbw_MBps']:.0f})"
                                            for op in OPS) + " |")
    out("")

if faults:
    out("## zt train under each fault (hosts_faults; 2 hosts x 1 rank, 2 blocks of width 64, batch 8 x 32)\n")
    out("Median step time of steps 2 to 6; losses, validation losses and grad norms against the clean run.\n")
    out("| layout | fault | step ms | clean step ms | x clean | run s (clean) | bitwise |")
    out("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    for (lay, f), d in sorted(faults.items()):
        r = d["step_ms"] / d["clean_step_ms"] if d["clean_step_ms"] else 0
        out(f"| {lay} | {f} | {d['step_ms']:.1f} | {d['clean_step_ms']:.1f} | {r:.1f} | {d['run_s']:.1f} ({d['clean_run_s']:.1f}) | "
            f"{'yes' if d['bitwise'] else 'NO'} |")
    out("")
for lay, d in sorted(down.items()):
    out(f"Link down in the middle of a step ({lay}, 4 blocks of width 128, `--comm-timeout 5`): every rank")
    out(f"ended {d['ranks_ended_s']:.1f} s after the link went down; mpirun ended while it was down: "
        f"{d['mpirun_ended_while_down']}; {d['mpirun_after_up_s']:.1f} s after it came up.\n")

# a layout at a setting run more than once: the run of the median step (the lower middle of an
# even count) stands for it; the table's cells name every run's step
for k, runs in allsteps.items():
    runs = sorted(runs, key=lambda r: r["step_ms"])
    steps[k] = runs[(len(runs) - 1) // 2]
    steps[k]["all"] = [r["step_ms"] for r in runs]


def cell(d):
    c = f"{d['step_ms']:.0f} ({d['comm_wait_ms']:.0f})"
    return c + (" [runs: " + ", ".join(f"{v:.0f}" for v in d["all"]) + "]" if len(d["all"]) > 1 else "")


if steps:
    out("## gpt2-124m's step (global batch 4 x 32, median of steps 3 to 5)\n")
    out("Milliseconds per step; `comm wait` is the median over steps of the slowest rank's time")
    out("blocked in comm calls (0 for the pipeline, whose transfers are not counted there).\n")
    lays = [("ddp", "DDP, 2 ranks"), ("full", "FSDP full, 2 ranks"), ("pp", "pipeline zb-h1, 2 stages, M=2"),
            ("full4", "FSDP full, 4 ranks (2 a host)"), ("hybrid4", "hybrid:2, 4 ranks (a shard group a host)")]
    sets = [s for s in ["one host", "unlimited", "rate 1gbit", "rate 100mbit"] if any(k[1] == s for k in steps)]
    out("| layout | " + " | ".join(f"{s} (comm wait)" for s in sets) + " |")
    out("| --- |" + " ---: |" * len(sets))
    for lay, title in lays:
        cells = []
        for s in sets:
            d = steps.get((lay, s, 0))
            cells.append(cell(d) if d else "")
        out(f"| {title} | " + " | ".join(cells) + " |")
    out("\nThe progress thread (`ZT_COMM_PROGRESS=1`) across hosts:\n")
    out("| layout | setting | step ms without (each run) | with the thread (each run) |")
    out("| --- | --- | ---: | ---: |")
    for (lay, s, p), d in sorted(steps.items()):
        if p and (lay, s, 0) in steps:
            out(f"| {lay} | {s} | {', '.join(f'{v:.0f}' for v in steps[(lay, s, 0)]['all'])} | "
                f"{', '.join(f'{v:.0f}' for v in d['all'])} |")
    out("\nThe pipeline against the simulator (zt schedule zb-h1, P=2, M=2, with the run's measured mean")
    out("per-microbatch F, B, W and C = the measured one-way time of a 192 KiB message at that setting):\n")
    out("| setting | progress | F / B / W ms | C ms | measured step ms | simulated, C=0 | simulated, C | measured bubble | simulated bubble |")
    out("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for (lay, s, p), d in sorted(steps.items(), key=lambda kv: (sets.index(kv[0][1]) if kv[0][1] in sets else 9, kv[0][2])):
        if lay == "pp" and "sim_step_ms" in d:
            out(f"| {s} | {'on' if p else 'off'} | {d['f_ms']} / {d['b_ms']} / {d['w_ms']} | {d['hop_ms']} | {d['step_ms']:.0f} | "
                f"{d['sim_step_ms_no_comm']:.0f} | {d['sim_step_ms']:.0f} | {d['pp_bubble']:.2f} | {d['sim_bubble']:.2f} |")
    out("")
