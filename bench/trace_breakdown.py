#!/usr/bin/env python3
"""Where a training step's time goes, from a loom-run --trace file.

Sums the trace's instruction events per opcode (args.op) and per
instruction name with the layer index folded (h.3.mlp.c_fc -> h.*.mlp.c_fc),
over the steps after --skip warm-up steps, and prints two tables: time per
step, share of the step, instructions per step. On the CUDA backend
loom-run waits for each instruction's kernels while tracing, so the spans
are device times (and their sum is a serialized step: no host/device or
compute/communication overlap).

usage: trace_breakdown.py TRACE.json [--skip N] [--top K] [--json F]
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
    return events


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


def table(title, rows, step_us, top):
    print(f"{title:<40} {'ms/step':>9} {'share':>7} {'count':>6}")
    for key, (us, n) in rows[:top]:
        print(f"{key:<40} {us / 1e3:9.3f} {100 * us / step_us:6.1f}% {n:6d}")
    rest = rows[top:]
    if rest:
        us = sum(r[1][0] for r in rest)
        n = sum(r[1][1] for r in rest)
        print(f"{f'({len(rest)} more)':<40} {us / 1e3:9.3f} "
              f"{100 * us / step_us:6.1f}% {n:6d}")


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("trace", help="loom-run --trace file")
    ap.add_argument("--skip", type=int, default=1,
                    help="warm-up steps left out (default 1)")
    ap.add_argument("--top", type=int, default=15,
                    help="rows of the per-name table (default 15)")
    ap.add_argument("--json", help="write the sums as JSON here")
    args = ap.parse_args()
    if args.skip < 0 or args.top < 1:
        fail("--skip must be >= 0 and --top >= 1")

    steps = split_steps(load_events(args.trace))
    if len(steps) <= args.skip:
        fail(f"the trace has {len(steps)} step(s); nothing is left after "
             f"--skip {args.skip} (run more steps or skip fewer)")
    timed = steps[args.skip:]
    per_op = defaultdict(lambda: [0.0, 0])
    per_name = defaultdict(lambda: [0.0, 0])
    for step in timed:
        for e in step:
            dur = float(e.get("dur", 0))
            op = (e.get("args") or {}).get("op", e.get("name", "?"))
            per_op[op][0] += dur
            per_op[op][1] += 1
            key = fold_layer(str(e.get("name", "?")))
            per_name[key][0] += dur
            per_name[key][1] += 1
    n = len(timed)
    norm = lambda d: sorted(((k, (v[0] / n, v[1] // n)) for k, v in d.items()),
                            key=lambda r: -r[1][0])
    ops, names = norm(per_op), norm(per_name)
    step_us = sum(v[0] for _, v in ops)
    if step_us <= 0:
        fail("the trace's instructions took no time")
    print(f"{n} step(s) after {args.skip} skipped: instructions sum to "
          f"{step_us / 1e3:.2f} ms per step")
    table("opcode", ops, step_us, len(ops))
    print()
    table("instruction (layers folded)", names, step_us, args.top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"steps": n, "step_ms": step_us / 1e3,
                       "per_op_ms": {k: v[0] / 1e3 for k, v in ops},
                       "per_name_ms": {k: v[0] / 1e3 for k, v in names}},
                      f, indent=1)


if __name__ == "__main__":
    main()
