#!/usr/bin/env python3
"""Compares the per-step losses of Loom JSON logs.

    compare_logs.py REFERENCE.jsonl PART.jsonl [PART.jsonl ...] --rtol R

The parts together must cover exactly the reference's steps (e.g. the two
halves of an interrupted run vs the uninterrupted one). Prints the largest
relative difference of `loss` (and of `grad_norm`/`lr` when logged) and
PASS, or FAIL with the first offending step; exit 1 on FAIL.
"""
import argparse
import json
import sys


def read_steps(path):
    steps = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            record = json.loads(line)
            if "step" in record and "loss" in record:
                steps[record["step"]] = record
    return steps


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("reference")
    ap.add_argument("parts", nargs="+")
    ap.add_argument("--rtol", type=float, default=1e-6)
    args = ap.parse_args()

    reference = read_steps(args.reference)
    combined = {}
    for part in args.parts:
        for step, record in read_steps(part).items():
            if step in combined:
                print(f"FAIL: step {step} appears in two parts")
                return 1
            combined[step] = record
    if sorted(combined) != sorted(reference):
        print(f"FAIL: steps differ: reference {sorted(reference)}, "
              f"parts {sorted(combined)}")
        return 1
    worst = {"loss": 0.0, "grad_norm": 0.0, "lr": 0.0}
    for step in sorted(reference):
        for key in worst:
            if key in reference[step] and key in combined[step]:
                d = rel(combined[step][key], reference[step][key])
                worst[key] = max(worst[key], d)
                if d > args.rtol:
                    print(f"FAIL: step {step} {key}: {combined[step][key]!r} vs "
                          f"{reference[step][key]!r} (relative {d:.3g} > "
                          f"{args.rtol:g})")
                    return 1
    print(f"steps {min(reference)}..{max(reference)}: max relative difference "
          f"loss {worst['loss']:.3g}, grad_norm {worst['grad_norm']:.3g}, "
          f"lr {worst['lr']:.3g}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
