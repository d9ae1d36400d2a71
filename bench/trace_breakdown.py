#!/usr/bin/env python3
"""Where a training step's time goes, from a loom-run --trace file.

Sums the trace's instruction events per opcode (args.op) and per
instruction name with the layer index folded (h.3.mlp.c_fc -> h.*.mlp.c_fc),
over the steps after --skip warm-up steps, and prints two tables: time per
step, share of the step, instructions per step. On the CUDA backend
loom-run waits for each instruction's kernels while tracing, so the spans
are device times (and their sum is a serialized step: no host/device or
compute/communication overlap).

Each span also carries what it must at least do (args.flops, args.bytes;
runtime/core/instruction_cost.h), so both tables give the rates it reached
(GFLOP/s, GB/s) and, where the device's peaks are known (the trace's
otherData, which loom-run --backend cuda writes, or --peak-tflops and
--peak-gbps), its roofline: the time those FLOPs and bytes take at the
peaks, max(flops / peak rate, bytes / bandwidth), and the share of the
measured time that is ("of roof": 100% = at the roofline). The kernels far
from theirs are where a step's time can still be won.

usage: trace_breakdown.py TRACE.json [--skip N] [--top K] [--json F]
                          [--peak-tflops F --peak-gbps G]
"""
import argparse
import json
import re
import sys
from collections import defaultdict

PROG = "trace_breakdown.py"


def fail(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(1)


def load_events(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except OSError as e:
        fail(f"cannot read '{path}': {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"'{path}' is not JSON ({e}); pass a loom-run --trace file")
    events = trace.get("traceEvents") if isinstance(trace, dict) else None
    if not isinstance(events, list):
        fail(f"'{path}' has no traceEvents list; pass a loom-run --trace file")
    other = trace.get("otherData")
    return events, other if isinstance(other, dict) else {}


def split_steps(events):
    """Instruction events grouped by step: each 'load batch S' event starts
    step S (loom-run writes them in order, one per step)."""
    steps, current = [], None
    for e in events:
        if e.get("cat") == "data" and str(e.get("name", "")).startswith(
                "load batch"):
            current = []
            steps.append(current)
        elif current is not None and e.get("ph") == "X":
            current.append(e)
    return steps


def fold_layer(name):
    return re.sub(r"(^|\.)h\.\d+\.", r"\1h.*.", name)


class Sums:
    """One row's totals over the timed steps."""

    def __init__(self):
        self.us = 0.0
        self.count = 0
        self.flops = 0.0
        self.bytes = 0
        self.costed = False  # some span carried args.flops / args.bytes

    def add(self, e):
        self.us += float(e.get("dur", 0))
        self.count += 1
        args = e.get("args") or {}
        if "flops" in args or "bytes" in args:
            self.costed = True
            self.flops += float(args.get("flops", 0))
            self.bytes += int(args.get("bytes", 0))

    def merged(self, other, scale=1):
        """These sums plus `other`'s, all divided by `scale`."""
        r = Sums()
        r.us = (self.us + other.us) / scale
        r.count = (self.count + other.count) // scale
        r.flops = (self.flops + other.flops) / scale
        r.bytes = (self.bytes + other.bytes) // scale
        r.costed = self.costed or other.costed
        return r

    def roofline_us(self, peaks):
        """Microseconds at the peaks, None without them or without costs."""
        if not peaks or not self.costed:
            return None
        tflops, gbps = peaks
        return max(self.flops / (tflops * 1e6), self.bytes / (gbps * 1e3))


def table(title, rows, step_us, top, peaks):
    """rows: (key, Sums per step), longest first."""
    head = f"{title:<40} {'ms/step':>9} {'share':>7} {'count':>6}"
    head += f" {'GFLOP/s':>9} {'GB/s':>7}"
    if peaks:
        head += f" {'roof ms':>9} {'of roof':>7}"
    print(head)

    def line(key, r):
        text = (f"{key:<40} {r.us / 1e3:9.3f} {100 * r.us / step_us:6.1f}% "
                f"{r.count:6d}")
        if r.costed and r.us > 0:
            text += (f" {r.flops / r.us / 1e3:9.1f}" if r.flops > 0
                     else f" {'-':>9}")
            text += f" {r.bytes / r.us / 1e3:7.1f}"
        else:
            text += f" {'-':>9} {'-':>7}"
        roof = r.roofline_us(peaks)
        if roof is not None:
            text += f" {roof / 1e3:9.3f} {100 * roof / r.us if r.us > 0 else 0:6.1f}%"
        elif peaks:
            text += f" {'-':>9} {'-':>7}"
        print(text)

    for key, r in rows[:top]:
        line(key, r)
    rest = rows[top:]
    if rest:
        total = Sums()
        for _, r in rest:
            total = total.merged(r)
        line(f"({len(rest)} more)", total)


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="loom-run --trace file")
    ap.add_argument("--skip", type=int, default=1,
                    help="warm-up steps left out (default 1)")
    ap.add_argument("--top", type=int, default=15,
                    help="rows of the per-name table (default 15)")
    ap.add_argument("--json", help="write the sums as JSON here")
    ap.add_argument("--peak-tflops", type=float,
                    help="the device's peak TFLOP/s for the roofline "
                    "(default: the trace's otherData.peak_tflops)")
    ap.add_argument("--peak-gbps", type=float,
                    help="the device's memory bandwidth in GB/s for the "
                    "roofline (default: the trace's otherData.peak_gbps)")
    args = ap.parse_args()
    if args.skip < 0 or args.top < 1:
        fail("--skip must be >= 0 and --top >= 1")
    for flag, value in (("--peak-tflops", args.peak_tflops),
                        ("--peak-gbps", args.peak_gbps)):
        if value is not None and not value > 0:
            fail(f"{flag} must be > 0, got {value}")

    events, other = load_events(args.trace)
    tflops = args.peak_tflops or other.get("peak_tflops")
    gbps = args.peak_gbps or other.get("peak_gbps")
    peaks = (float(tflops), float(gbps)) if tflops and gbps else None
    steps = split_steps(events)
    if len(steps) <= args.skip:
        fail(f"the trace has {len(steps)} step(s); nothing is left after "
             f"--skip {args.skip} (run more steps or skip fewer)")
    timed = steps[args.skip:]
    per_op = defaultdict(Sums)
    per_name = defaultdict(Sums)
    for step in timed:
        for e in step:
            op = (e.get("args") or {}).get("op", e.get("name", "?"))
            per_op[op].add(e)
            per_name[fold_layer(str(e.get("name", "?")))].add(e)
    n = len(timed)

    def per_step(d):
        rows = [(k, v.merged(Sums(), n)) for k, v in d.items()]
        return sorted(rows, key=lambda kr: -kr[1].us)

    ops, names = per_step(per_op), per_step(per_name)
    step_us = sum(r.us for _, r in ops)
    if step_us <= 0:
        fail("the trace's instructions took no time")
    print(f"{n} step(s) after {args.skip} skipped: instructions sum to "
          f"{step_us / 1e3:.2f} ms per step")
    roofs = [r.roofline_us(peaks) for _, r in ops]
    roof_us = sum(x for x in roofs if x is not None)
    if peaks:
        print(f"roofline: {peaks[0]:g} TFLOP/s, {peaks[1]:g} GB/s; at it the "
              f"instructions would take {roof_us / 1e3:.2f} ms per step "
              f"({100 * roof_us / step_us:.1f}% of the measured)")
    else:
        print("no roofline: the trace names no device peaks (pass "
              "--peak-tflops and --peak-gbps)")
    table("opcode", ops, step_us, len(ops), peaks)
    print()
    table("instruction (layers folded)", names, step_us, args.top, peaks)
    if args.json:
        def detail(rows):
            return {k: {"ms": r.us / 1e3, "count": r.count,
                        "flops": r.flops, "bytes": r.bytes,
                        "roofline_ms": (None if r.roofline_us(peaks) is None
                                        else r.roofline_us(peaks) / 1e3)}
                    for k, r in rows}
        with open(args.json, "w") as f:
            json.dump({"steps": n, "step_ms": step_us / 1e3,
                       "peak_tflops": peaks[0] if peaks else None,
                       "peak_gbps": peaks[1] if peaks else None,
                       "roofline_ms": roof_us / 1e3 if peaks else None,
                       "per_op_ms": {k: r.us / 1e3 for k, r in ops},
                       "per_name_ms": {k: r.us / 1e3 for k, r in names},
                       "per_op": detail(ops)},
                      f, indent=1)


if __name__ == "__main__":
    main()
