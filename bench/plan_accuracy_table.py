#!/usr/bin/env python3
"""bench/plan_accuracy_table.py RESULTS.jsonl: the Markdown table of bench/plan_accuracy.sh's
results (a row per run: predicted and measured peak RSS, accounted peak and step; a row per group:
the planner's pick against the fastest measured configuration that fit), and the issue's targets
with what met them and what did not."""
import json
import statistics
import sys


def mib(b):
    return "%.0f" % (b / 1048576.0) if b else "-"


def pct(x):
    return "%+.1f%%" % (100 * x) if x is not None else "-"


def main(path):
    rows = [json.loads(l) for l in open(path) if l.strip()]
    runs = [r for r in rows if r.get("kind") == "run"]
    ok = [r for r in runs if r.get("rc") == 0 and "measured" in r]
    out = []
    out.append("# The planner's predictions against measured runs\n")
    out.append("`bench/plan_accuracy.sh` (%d runs, %d completed). Peak RSS and accounted peak: the largest rank's; "
               "step: the median step after the first; errors are (predicted - measured) / measured. Memory under "
               "a limit ran inside a memory cgroup of that size (`bench/mem_limit.sh`): its peak is the cgroup's "
               "(page cache included).\n" % (len(runs), len(ok)))
    out.append("| model | ranks | limit | configuration | RSS pred / meas MiB | err | accounted pred / meas MiB | err "
               "| cgroup peak MiB | step pred / meas s | err | load |")
    out.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in runs:
        if r.get("rc") != 0 or "measured" not in r:
            out.append("| %s | %d | %s | %s | failed (rc %s) | | | | | | | |" % (r["model"], r["ranks"], r["limit"],
                                                                         r["flags"], r.get("rc")))
            continue
        p, m = r["predicted"], r["measured"]
        out.append("| %s | %d | %s | %s | %s / %s | %s | %s / %s | %s | %s | %.2f / %.2f | %s | %.1f |" % (
            r["model"], r["ranks"], r["limit"], r["config"], mib(p["rss"]), mib(m["rss"]), pct(r["rss_err"]),
            mib(p["accounted"]), mib(m["accounted"]), pct(r["accounted_err"]),
            mib(r["cgroup_peak"]) if r["cgroup_peak"] > 0 else "-", p["step_s"], m["step_s"], pct(r["step_err"]),
            r["load"]))
    # the planner's picks
    out.append("\n## The planner's pick per group\n")
    out.append("| group | picked | its measured step s | fastest that fit (measured) | its step s | pick / fastest |")
    out.append("| --- | --- | --- | --- | --- | --- |")
    picks = []
    for c in (r for r in rows if r.get("kind") == "choice"):
        g = [r for r in ok if r["group"] == c["group"]]
        lim = g[0]["limit"] if g else "-"
        fit = [r for r in g if lim == "-" or (r["rc"] == 0)]
        mine = [r for r in g if r.get("config") == c["config"]]
        if not fit or not mine:
            out.append("| %s | %s | not measured | | | |" % (c["group"], c["config"]))
            continue
        best = min(fit, key=lambda r: r["measured"]["step_s"])
        ratio = mine[0]["measured"]["step_s"] / best["measured"]["step_s"]
        picks.append((c["group"], ratio))
        out.append("| %s | %s | %.2f | %s | %.2f | %.3f |" % (c["group"], c["config"], mine[0]["measured"]["step_s"],
                                                           best["config"], best["measured"]["step_s"], ratio))
    # targets
    out.append("\n## Targets\n")
    if ok:
        rss = [abs(r["rss_err"]) for r in ok]
        acc = [abs(r["accounted_err"]) for r in ok if r["accounted_err"] is not None]
        st = [abs(r["step_err"]) for r in ok if r["step_err"] is not None]
        worst_rss = max(ok, key=lambda r: abs(r["rss_err"]))
        worst_st = max(ok, key=lambda r: abs(r["step_err"] or 0))
        within = sum(x <= 0.05 for x in rss)
        out.append("- peak memory within 5%% for every configuration: **%s** (%d of %d within; worst %s, %s %s "
                   "at %d ranks); the accounted peak: %d of %d within 5%%, median error %.1f%%" % (
                       "met" if within == len(rss) else "missed", within, len(rss), pct(worst_rss["rss_err"]),
                       worst_rss["model"], worst_rss["config"], worst_rss["ranks"], sum(x <= 0.05 for x in acc),
                       len(acc), 100 * statistics.median(acc) if acc else 0))
        med = statistics.median(st) if st else 0
        out.append("- step time within 15%% at the median: **%s** (median |error| %.1f%%)" % (
            "met" if med <= 0.15 else "missed", 100 * med))
        out.append("- step time within 30%% at worst: **%s** (worst %s, %s %s at %d ranks)" % (
            "met" if max(st) <= 0.30 else "missed", pct(worst_st["step_err"]), worst_st["model"],
            worst_st["config"], worst_st["ranks"]))
    if picks:
        bad = [g for g, x in picks if x > 1.10]
        out.append("- the planner's pick within 10%% of the fastest that fit: **%s** (%d of %d groups; worst %.3f)" % (
            "met" if not bad else "missed", len(picks) - len(bad), len(picks), max(x for _, x in picks)))
    print("\n".join(out))


if __name__ == "__main__":
    main(sys.argv[1])
