#!/usr/bin/env python3
"""Check a run's TensorBoard event files against its --metrics file, as TensorBoard's own
readers see them.

    pip install tensorboard
    python3 scripts/check_tensorboard.py RUN_DIR --metrics METRICS.jsonl [--reader all] [--show TAG]

RUN_DIR is the --tensorboard folder of `zt train` (its event files, all of them: a resumed
run adds one). The metrics file is the same run's --metrics JSON lines; a resumed run
appends to it, so a step that appears on several lines takes its last line, as TensorBoard
drops the steps a killed run logged past its checkpoint.

Checks, for each reader:
  - every scalar in the event files is a figure of the metrics file (tag -> key below) at
    the same step, and its value equals that figure up to float32 rounding (TensorBoard
    stores float32) and the metrics file's printed precision (half a unit of the last
    printed digit);
  - every figure of the metrics file is in the event files (all steps, all tags);
  - no (tag, step) appears twice (it would if the resume's purge did not happen).

Readers (--reader, default all of the first two):
  accumulator  tensorboard.backend.event_processing.event_accumulator.EventAccumulator
               (the legacy Python loader: simple_value scalars)
  plugin       plugin_event_accumulator.EventAccumulator (what `tensorboard --load_fast=false`
               serves: scalars as tensors)
  server       starts `tensorboard --load_fast=true` (the Rust data server, TensorBoard's
               default where it is installed) on a free local port and reads its HTTP API
               (/data/plugin/scalars/...), as the browser does
  all          the three

Exit status: 0 when every check passes, 1 when one fails, 2 on bad usage or missing input.
"""

import argparse
import json
import math
import os
import re
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

# tag -> path of the figure in a metrics line. mem/<TAG> and mem_peak/<TAG> are added for
# every allocator tag the metrics file has under "mem" (its "total" included).
FIXED_TAGS = {
    "train/loss": ("loss",),
    "train/lr": ("lr",),
    "train/grad_norm": ("grad_norm",),
    "train/loss_scale": ("loss_scale",),
    "val/loss": ("val_loss",),
    "perf/tokens_per_s": ("tokens_per_s",),
    "perf/mfu": ("mfu",),
    "perf/step_ms": ("step_ms",),
    "mem_peak/rss": ("peak_rss",),
}


class Printed:
    """A number as the metrics file printed it: its value and half a unit of its last digit."""

    def __init__(self, text):
        self.text = text
        self.value = float(text)
        m = re.fullmatch(r"-?(\d+)(?:\.(\d*))?(?:[eE]([-+]?\d+))?", text)
        if not m:  # nan, inf
            self.res = 0.0
        else:
            decimals = len(m.group(2) or "")
            exp = int(m.group(3) or 0)
            self.res = 0.5 * 10.0 ** (exp - decimals)


def load_metrics(path):
    """{step: line} with numbers as Printed; a later line for a step replaces an earlier one."""
    steps = {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            # C's printf writes nan/inf, which JSON has no words for
            line = re.sub(r"(?<=[:\[,])(-?)(nan|inf)(?=[,}\]])", lambda m: '"%s%s"' % m.groups(), line)
            try:
                rec = json.loads(line, parse_float=Printed, parse_int=Printed)
            except json.JSONDecodeError as e:
                sys.exit("%s:%d: not JSON: %s" % (path, lineno, e))
            if "step" not in rec:
                sys.exit("%s:%d: no \"step\"" % (path, lineno))
            steps[int(rec["step"].value)] = rec
    return steps


def expected_figures(steps):
    """{tag: {step: Printed}} from the metrics lines."""
    out = {}
    for step, rec in steps.items():
        tags = dict(FIXED_TAGS)
        for name in (rec.get("mem") or {}):
            tags["mem/" + name] = ("mem", name, "current")
            tags["mem_peak/" + name] = ("mem", name, "peak")
        for tag, path in tags.items():
            v = rec
            for k in path:
                v = v.get(k) if isinstance(v, dict) else None
            if isinstance(v, str):  # "nan", "-inf" (see load_metrics)
                v = Printed(v)
            if isinstance(v, Printed):
                out.setdefault(tag, {})[step] = v
    return out


# ------------------------------------------------------------------ readers
# Each returns {tag: [(step, value), ...]} in the order the reader gives them.


def read_accumulator(run_dir):
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(run_dir, size_guidance={ea.SCALARS: 0})  # 0: keep every point
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()[ea.SCALARS]}


def read_plugin(run_dir):
    from tensorboard.backend.event_processing import plugin_event_accumulator as pea
    from tensorboard.util import tensor_util

    acc = pea.EventAccumulator(run_dir, size_guidance={pea.TENSORS: 0})
    acc.Reload()
    out = {}
    for tag in acc.Tags()[pea.TENSORS]:
        out[tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto).item())) for e in acc.Tensors(tag)]
    return out


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


def read_server(run_dir, timeout_s=90):
    port = _free_port()
    cmd = [sys.executable, "-m", "tensorboard.main", "--logdir", os.path.abspath(run_dir), "--host", "127.0.0.1",
           "--port", str(port), "--load_fast=true", "--reload_interval", "1"]
    log = open(os.devnull, "w")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = "http://127.0.0.1:%d/data/plugin/scalars/" % port
    try:
        deadline = time.time() + timeout_s
        previous = None
        while time.time() < deadline:
            if proc.poll() is not None:
                raise RuntimeError("tensorboard exited with status %d: run %s to see why"
                                   % (proc.returncode, " ".join(cmd)))
            time.sleep(2)
            try:
                tags = _get_json(base + "tags")
                snap = {}
                for run, run_tags in tags.items():
                    for tag in run_tags:
                        q = urllib.parse.urlencode({"run": run, "tag": tag})
                        snap[tag] = [(int(s), v) for _, s, v in _get_json(base + "scalars?" + q)]
            except OSError:
                continue  # not listening yet
            if snap and snap == previous:  # two reloads in a row agree: loading is done
                if len(tags) != 1:
                    raise RuntimeError("tensorboard sees %d runs in %s (%s); expected one"
                                       % (len(tags), run_dir, sorted(tags)))
                return snap
            previous = snap
        raise RuntimeError("tensorboard did not serve stable scalars within %d s" % timeout_s)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


READERS = {"accumulator": read_accumulator, "plugin": read_plugin, "server": read_server}

# ------------------------------------------------------------------ the check


def same(tb, want):
    if math.isnan(want.value) or math.isnan(tb):
        return math.isnan(want.value) and math.isnan(tb)
    if math.isinf(want.value) or math.isinf(tb):
        return tb == want.value
    # |tb - true| <= half a float32 ulp of true <= |true| * 2^-24, and |true - want| <= res
    tol = want.res + (abs(want.value) + want.res) * 2.0 ** -24 + 1e-45
    return abs(tb - want.value) <= tol


def check(name, got, want, max_report=20):
    problems = []
    points = 0
    for tag in sorted(got):
        seen = {}
        for step, value in got[tag]:
            points += 1
            if step in seen:
                problems.append("%s step %d: appears twice (%r, then %r)" % (tag, step, seen[step], value))
            seen[step] = value
            if tag not in want:
                problems.append("%s: not a figure of the metrics file" % tag)
                break
            w = want[tag].get(step)
            if w is None:
                problems.append("%s step %d: not in the metrics file (value %r)" % (tag, step, value))
            elif not same(value, w):
                problems.append("%s step %d: %r in TensorBoard, %s in the metrics file" % (tag, step, value, w.text))
    for tag in sorted(want):
        have = {s for s, _ in got.get(tag, [])}
        missing = sorted(set(want[tag]) - have)
        if missing:
            problems.append("%s: %d step(s) of the metrics file missing from TensorBoard (first: %s)" % (
                tag, len(missing), missing[:5]))
    steps = sorted({s for pts in got.values() for s, _ in pts})
    span = "steps %d..%d" % (steps[0], steps[-1]) if steps else "no steps"
    print("%-11s %d tags, %d points, %s: %s" % (name, len(got), points, span,
                                                 "OK" if not problems else "%d problem(s)" % len(problems)))
    for p in problems[:max_report]:
        print("    " + p)
    if len(problems) > max_report:
        print("    ... and %d more" % (len(problems) - max_report))
    return not problems


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", help="the --tensorboard folder of the run")
    ap.add_argument("--metrics", required=True, help="the run's --metrics JSON-lines file")
    ap.add_argument("--reader", action="append", choices=sorted(READERS) + ["all"],
                    help="reader(s) to check with (repeatable; default: accumulator and plugin)")
    ap.add_argument("--show", action="append", default=[], metavar="TAG",
                    help="print every (step, value) that each reader returned for TAG")
    a = ap.parse_args()
    if not os.path.isdir(a.run_dir):
        print("%s is not a folder" % a.run_dir, file=sys.stderr)
        return 2
    if not any(n.startswith("events.out.tfevents.") for n in os.listdir(a.run_dir)):
        print("%s holds no events.out.tfevents.* file" % a.run_dir, file=sys.stderr)
        return 2
    try:
        import tensorboard  # noqa: F401
    except ImportError:
        print("needs TensorBoard's reader: pip install tensorboard", file=sys.stderr)
        return 2
    readers = a.reader or ["accumulator", "plugin"]
    if "all" in readers:
        readers = ["accumulator", "plugin", "server"]
    want = expected_figures(load_metrics(a.metrics))
    ok = True
    for name in readers:
        try:
            got = READERS[name](a.run_dir)
        except Exception as e:  # a reader that cannot run is a failed check, with its reason
            print("%-11s failed: %s" % (name, e))
            ok = False
            continue
        ok = check(name, got, want) and ok
        for tag in a.show:
            print("    %s %s: %s" % (name, tag, got.get(tag, "absent")))
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
