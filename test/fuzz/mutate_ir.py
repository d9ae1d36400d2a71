#!/usr/bin/env python3
"""Feeds randomly mutated copies of valid Loom IR to loom-opt.

Each mutant must end in one of two ways: accepted (exit 0, and the printed
IR parses again), or rejected with a diagnostic that carries a location
(exit 1, `file:line:col: error:`). A signal, another exit code, a crash
banner, a missing location or a time-out is a failure. The seed fixes the
mutants, so a failure reproduces; failing inputs are written next to the
report for inspection.

Usage: mutate_ir.py --loom-opt PATH --count N --seed S --out DIR INPUT...
"""
import argparse
import os
import random
import re
import subprocess
import sys

OPS = ["loom.embedding", "loom.add", "loom.linear", "loom.matmul",
       "loom.layer_norm", "loom.gelu", "loom.attention", "loom.softmax",
       "loom.cross_entropy", "loom.reshape", "loom.transpose", "loom.slice",
       "loom.concat", "loom.block", "loom.yield", "loom.mesh",
       "loom.all_reduce", "loom.all_gather", "loom.reduce_scatter",
       "loom.all_to_all", "loom.send", "loom.recv", "func.return"]
TYPES = ["f32", "f16", "bf16", "i32", "i64", "f64", "index"]
JUNK = ["{", "}", "(", ")", "[", "]", "<", ">", "%", "\"", ":", ",", "@",
        "#loom.", "-1", "0", "x", "?", "->", "^bb0", "\n"]
CRASH_MARKERS = ["Stack dump", "PLEASE submit a bug report", "Assertion",
                 "LLVM ERROR", "Segmentation fault", "UNREACHABLE"]
LOCATED_ERROR = re.compile(r"^[^:\n]+:\d+:\d+: error: ", re.M)


def mutate(text, rng):
    """Applies one to three random edits."""
    for _ in range(rng.randint(1, 3)):
        lines = text.split("\n")
        kind = rng.randrange(10)
        if kind == 0 and len(lines) > 1:                     # delete a line
            del lines[rng.randrange(len(lines))]
        elif kind == 1:                                      # duplicate a line
            i = rng.randrange(len(lines))
            lines.insert(i, lines[i])
        elif kind == 2 and len(lines) > 1:                   # swap two lines
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == 3:                                      # change a number
            nums = list(re.finditer(r"\d+", text))
            if nums:
                m = rng.choice(nums)
                new = str(rng.choice([0, 1, 2, 3, 7, 64, 65, 4096,
                                      2**31, 2**63, 10**30]))
                text = text[:m.start()] + new + text[m.end():]
                continue
        elif kind == 4:                                      # truncate
            return text[:rng.randrange(len(text) + 1)]
        elif kind == 5:                                      # swap an op name
            found = [m for m in re.finditer(r"(loom|func)\.[a-z_]+", text)]
            if found:
                m = rng.choice(found)
                text = text[:m.start()] + rng.choice(OPS) + text[m.end():]
                continue
        elif kind == 6:                                      # drop a token
            tokens = re.split(r"(\s+)", text)
            if tokens:
                del tokens[rng.randrange(len(tokens))]
            text = "".join(tokens)
            continue
        elif kind == 7:                                      # insert junk
            i = rng.randrange(len(text) + 1)
            text = text[:i] + rng.choice(JUNK) + text[i:]
            continue
        elif kind == 8:                                      # change a type
            found = list(re.finditer(r"\b(f32|i32|f64|i64)\b", text))
            if found:
                m = rng.choice(found)
                text = text[:m.start()] + rng.choice(TYPES) + text[m.end():]
                continue
        else:                                                # rename a value
            names = list(re.finditer(r"%[A-Za-z0-9_]+", text))
            if len(names) > 1:
                m, other = rng.choice(names), rng.choice(names)
                text = text[:m.start()] + other.group(0) + text[m.end():]
                continue
        text = "\n".join(lines)
    return text


PASS_ARGS = []  # extra loom-opt arguments (--passes), e.g. a pipeline


def run(loom_opt, path, timeout, extra=()):
    return subprocess.run([loom_opt, path, *extra, "-o", "-"],
                          capture_output=True, text=True, errors="replace",
                          timeout=timeout)


def check(loom_opt, path, timeout):
    """Returns None when loom-opt behaved, else a description."""
    try:
        r = run(loom_opt, path, timeout)
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout}s (hang)"
    if any(marker in r.stderr for marker in CRASH_MARKERS):
        return "crash banner:\n" + r.stderr[-2000:]
    if r.returncode == 0 and PASS_ARGS:
        # The mutant parses: the passes must handle it too, succeeding or
        # failing with a located diagnostic, never crashing.
        try:
            p = run(loom_opt, path, timeout, PASS_ARGS)
        except subprocess.TimeoutExpired:
            return f"passes {PASS_ARGS} hang"
        if any(marker in p.stderr for marker in CRASH_MARKERS):
            return f"passes {PASS_ARGS} crashed:\n" + p.stderr[-2000:]
        if p.returncode not in (0, 1):
            return f"passes {PASS_ARGS} exit code {p.returncode}:\n" + p.stderr[-2000:]
        if p.returncode == 1 and "error:" not in p.stderr:
            return f"passes {PASS_ARGS} failed without a diagnostic:\n" + p.stderr[-2000:]
    if r.returncode == 0:
        printed = path + ".printed.mlir"
        with open(printed, "w") as f:
            f.write(r.stdout)
        try:
            again = run(loom_opt, printed, timeout)
        except subprocess.TimeoutExpired:
            return "printed IR hangs when parsed again"
        if again.returncode != 0:
            return "accepted, but its printed form is rejected:\n" + again.stderr
        return None
    if r.returncode != 1:
        return f"exit code {r.returncode}:\n" + r.stderr[-2000:]
    if not LOCATED_ERROR.search(r.stderr):
        return "rejected without a located diagnostic:\n" + r.stderr[-2000:]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--loom-opt", required=True)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--passes", default="",
                    help="loom-opt pass arguments also run on every accepted "
                         "mutant (space-separated)")
    ap.add_argument("inputs", nargs="+")
    args = ap.parse_args()

    PASS_ARGS.extend(args.passes.split())
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    seeds = [open(p).read() for p in args.inputs]
    outcomes = {"accepted": 0, "rejected": 0}
    failures = []
    for i in range(args.count):
        text = mutate(rng.choice(seeds), rng)
        path = os.path.join(args.out, f"mutant-{i}.mlir")
        with open(path, "w") as f:
            f.write(text)
        problem = check(args.loom_opt, path, args.timeout)
        if problem:
            failures.append((path, problem))
            continue
        accepted = os.path.exists(path + ".printed.mlir")
        outcomes["accepted" if accepted else "rejected"] += 1
        os.remove(path)
        if accepted:
            os.remove(path + ".printed.mlir")
    for path, problem in failures:
        print(f"FAIL {path}: {problem}")
    print(f"mutants: {args.count}, accepted: {outcomes['accepted']}, "
          f"rejected with a located diagnostic: {outcomes['rejected']}, "
          f"failures: {len(failures)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
