#!/usr/bin/env python3
"""Checks the validation losses a training run logged (--val-data).

    compare_validation.py TRAIN.jsonl --steps 3,6
        [--eval 3=EVAL3.jsonl --eval 6=EVAL6.jsonl] [--reference REF.jsonl]
        --rtol R

TRAIN.jsonl must hold one {"step", "val_loss"} line for each of --steps,
in that order, and its summary's val_loss must be the last of them. Each
--eval S=F is the --log-json of `loom eval` on the checkpoint saved after
step S (same validation batches): its mean_loss must equal the training
run's val_loss after step S within R (the training program's forward is the
evaluation program's, on the same weights). --reference compares every
val_loss with another training run's at the same step (a partitioned run
against the single rank). The summary's sent_bytes_per_step must equal the
predicted figures on every rank: a validation's collectives are not a
training step's. Prints each comparison and PASS, or FAIL; exit 1 on FAIL.
"""
import argparse
import json
import sys


def read(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def validations(records):
    return [(r["step"], r["val_loss"]) for r in records if "val_loss" in r
            and not r.get("summary")]


def summary_of(records, path):
    for r in records:
        if r.get("summary"):
            return r
    raise SystemExit(f"FAIL: {path} has no summary line")


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("train")
    ap.add_argument("--steps", required=True)
    ap.add_argument("--eval", action="append", default=[])
    ap.add_argument("--reference")
    ap.add_argument("--rtol", type=float, default=1e-6)
    args = ap.parse_args()

    records = read(args.train)
    got = validations(records)
    want_steps = [int(s) for s in args.steps.split(",")]
    if [s for s, _ in got] != want_steps:
        print(f"FAIL: validations after steps {[s for s, _ in got]}, "
              f"expected {want_steps}")
        return 1
    summary = summary_of(records, args.train)
    if summary.get("val_loss") != got[-1][1]:
        print(f"FAIL: summary val_loss {summary.get('val_loss')!r} is not the "
              f"last validation's {got[-1][1]!r}")
        return 1
    for rank in summary["ranks"]:
        if rank["sent_bytes_per_step"] != rank.get(
                "predicted_sent_bytes_per_step"):
            print(f"FAIL: rank {rank['rank']} sent "
                  f"{rank['sent_bytes_per_step']} per step, predicted "
                  f"{rank.get('predicted_sent_bytes_per_step')}")
            return 1
    val = dict(got)
    worst = 0.0
    for spec in args.eval:
        step, path = spec.split("=", 1)
        step = int(step)
        mean = summary_of(read(path), path)["mean_loss"]
        d = rel(val[step], mean)
        worst = max(worst, d)
        print(f"after step {step}: val_loss {val[step]:.9g}, loom eval of the "
              f"checkpoint {mean:.9g}")
        if d > args.rtol:
            print(f"FAIL: relative {d:.3g} > {args.rtol:g}")
            return 1
    if args.reference:
        ref = dict(validations(read(args.reference)))
        for step, loss in got:
            if step not in ref:
                print(f"FAIL: the reference has no validation after {step}")
                return 1
            d = rel(loss, ref[step])
            worst = max(worst, d)
            if d > args.rtol:
                print(f"FAIL: after step {step}: val_loss {loss!r} vs the "
                      f"reference's {ref[step]!r} (relative {d:.3g} > "
                      f"{args.rtol:g})")
                return 1
    print(f"validations after steps {args.steps}: max relative difference "
          f"{worst:.3g}")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
