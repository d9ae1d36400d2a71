#!/usr/bin/env python3
"""Runs loom-run on truncated and bit-flipped copies of a real program.

Each copy must be refused with `loom-run: error:` on stderr and exit code 1:
never a signal, another exit code, or a hang. The copies are deterministic
(seeded) so a failure reproduces.

Usage: corrupt_programs.py LOOM_RUN PROGRAM DATA OUTDIR [--count N]
"""
import argparse
import os
import random
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("loom_run")
    ap.add_argument("program")
    ap.add_argument("data")
    ap.add_argument("outdir")
    ap.add_argument("--count", type=int, default=60)
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()

    good = open(args.program, "rb").read()
    rng = random.Random(args.seed)
    os.makedirs(args.outdir, exist_ok=True)
    failures = 0
    for i in range(args.count):
        data = bytearray(good)
        if i % 2 == 0:                         # truncate, header and payload
            cut = rng.randrange(len(data)) if i % 4 else rng.randrange(40)
            data = data[:cut]
            kind = f"truncated to {cut} bytes"
        else:                                  # flip 1-3 bits anywhere
            flips = [rng.randrange(len(data) * 8) for _ in range(rng.randint(1, 3))]
            for bit in flips:
                data[bit // 8] ^= 1 << (bit % 8)
            kind = f"bits {flips} flipped"
        path = os.path.join(args.outdir, f"corrupt-{i}.loom")
        with open(path, "wb") as f:
            f.write(data)
        try:
            r = subprocess.run([args.loom_run, path, "--data", args.data,
                                "--steps", "1", "--quiet"],
                               capture_output=True, text=True, timeout=60)
        except subprocess.TimeoutExpired:
            print(f"FAIL {path} ({kind}): hang")
            failures += 1
            continue
        if r.returncode != 1 or "loom-run: error:" not in r.stderr:
            print(f"FAIL {path} ({kind}): exit {r.returncode}\n{r.stderr[-1000:]}")
            failures += 1
    print(f"corrupt programs: {args.count}, refused cleanly: "
          f"{args.count - failures}, failures: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
