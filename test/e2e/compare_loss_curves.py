#!/usr/bin/env python3
"""Compares the loss curve of a run with a reference run of another
precision or partitioning, within a tolerance (not to round-off).

    compare_loss_curves.py REFERENCE.jsonl RUN.jsonl --tol T [--label L]

Both logs must hold the same steps. Prints, for `loss` and `grad_norm`, the
largest absolute and relative difference over the steps (and at which
step), the first and last losses of both runs, whether the run is bitwise
equal to the reference, and PASS when every step's loss differs by at most
T both absolutely and relatively (bf16 mixed precision vs fp32: the issue's
2e-2), else FAIL with the first offending step; exit 1 on FAIL. The grad
norm is reported, not checked: bf16 gradients round each element, and the
norm of a fresh model is small.
"""
import argparse
import json
import sys


def read_steps(path):
    steps = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                record = json.loads(line)
                if "step" in record and "loss" in record:
                    steps[record["step"]] = record
    return steps


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference")
    ap.add_argument("run")
    ap.add_argument("--tol", type=float, required=True)
    ap.add_argument("--label", default="run")
    args = ap.parse_args()
    ref, run = read_steps(args.reference), read_steps(args.run)
    if not ref or sorted(ref) != sorted(run):
        print(f"FAIL: {args.label}: steps differ: reference {sorted(ref)}, "
              f"run {sorted(run)}")
        return 1
    failure = None
    parts = []
    for key in ("loss", "grad_norm"):
        worst_abs = worst_rel = 0.0
        at = None
        for step in sorted(ref):
            if key not in ref[step] or key not in run[step]:
                continue
            a, b = run[step][key], ref[step][key]
            d = abs(a - b)
            r = d / max(abs(b), 1e-30)
            if d >= worst_abs:
                worst_abs, at = d, step
            worst_rel = max(worst_rel, r)
            if key == "loss" and failure is None and (d > args.tol or
                                                      r > args.tol):
                failure = (f"step {step} loss {a!r} vs {b!r}: |diff| {d:.3g}, "
                           f"relative {r:.3g} > {args.tol:g}")
        parts.append(f"{key} max |diff| {worst_abs:.3g} (step {at}), "
                     f"relative {worst_rel:.3g}")
    first, last = min(ref), max(ref)
    bitwise = all(run[s]["loss"] == ref[s]["loss"] for s in ref)
    print(f"{args.label}: steps {first}..{last}: " + "; ".join(parts) +
          f"; loss {run[first]['loss']:.4f} -> {run[last]['loss']:.4f} vs "
          f"{ref[first]['loss']:.4f} -> {ref[last]['loss']:.4f}; "
          f"{'bitwise equal' if bitwise else 'not bitwise equal'}")
    if failure:
        print(f"FAIL: {args.label}: {failure}")
        return 1
    print(f"PASS: {args.label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
