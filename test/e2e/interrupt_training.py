#!/usr/bin/env python3
"""Stops a training run with a signal and checks that nothing is lost.

    interrupt_training.py OUT --signal INT|TERM|USR1 --after N -- COMMAND...
    interrupt_training.py OUT --time-limit M -- COMMAND...

COMMAND is `loom train ...` or `loom-run PROGRAM ...` without --steps,
--schedule-steps, --log-json and the checkpoint flags. The script

1. runs COMMAND for 100000 steps, and once the JSON log holds N steps sends
   the signal to the process it started (loom, which passes it on to
   mpirun and the ranks; or loom-run itself);
   (with --time-limit M: runs COMMAND --time-limit M, which must stop it);
2. checks that the run stopped cleanly after some step K >= N: exit status
   128 + the signal (0 for the time limit), the message naming the step and
   the checkpoint saved there, K steps logged and a summary with
   "stopped_by";
3. resumes from that checkpoint for 3 steps, runs K + 3 steps without
   interruption, and checks that the two agree bitwise (losses, gradient
   norms, learning rates, final weights).

Prints one line ending in PASS, or FAIL and why (exit 1). Stdlib only.
"""
import argparse
import filecmp
import json
import os
import re
import signal
import subprocess
import sys
import time

TOTAL = 100000
MORE = 3


def fail(message):
    # stdout for the FileCheck line; stderr too, where lit prints it beside
    # the command (a CI log that shortens FileCheck's dump still shows why).
    print(f"FAIL: {message}")
    sys.stdout.flush()
    print(f"interrupt_training.py: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def records(path):
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    break  # a line being written
    return out


def steps_of(path):
    return [r for r in records(path) if "loss" in r and "step" in r]


def run(command, what):
    done = subprocess.run(command, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    if done.returncode != 0:
        fail(f"{what} exited {done.returncode}:\n{done.stdout[-3000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out")
    ap.add_argument("--signal", choices=["INT", "TERM", "USR1"])
    ap.add_argument("--time-limit", type=float)
    ap.add_argument("--after", type=int, default=1)
    argv = sys.argv[1:]
    if "--" not in argv:
        ap.error("the command follows '--'")
    cut = argv.index("--")
    args = ap.parse_args(argv[:cut])
    command = argv[cut + 1:]
    if (args.signal is None) == (args.time_limit is None):
        ap.error("pass one of --signal and --time-limit")
    sig = getattr(signal, "SIG" + args.signal) if args.signal else 0
    limit = ["--time-limit", str(args.time_limit)] if args.time_limit else []
    os.makedirs(args.out, exist_ok=True)
    log = os.path.join(args.out, "interrupted.jsonl")
    ckpt = os.path.join(args.out, "ckpt-{step}.safetensors")
    schedule = ["--schedule-steps", str(TOTAL)]

    # 1. The interrupted run.
    child = subprocess.Popen(
        command + ["--steps", str(TOTAL), "--log-json", log,
                   "--save-checkpoint", ckpt] + schedule + limit,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 300
    while sig and len(steps_of(log)) < args.after:
        if child.poll() is not None:
            fail(f"the run ended (exit {child.returncode}) before step "
                 f"{args.after}:\n{child.stdout.read()[-3000:]}")
        if time.time() > deadline:
            child.kill()
            fail(f"no {args.after} steps logged in 300 s")
        time.sleep(0.02)
    if sig:
        child.send_signal(sig)
    try:
        output, _ = child.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        child.kill()
        fail(f"the run did not stop within 300 s of step {args.after}")

    # 2. Stopped cleanly after step K.
    expected = 128 + sig if sig else 0
    if child.returncode != expected:
        fail(f"exit status {child.returncode}, expected {expected}:\n"
             f"{output[-3000:]}")
    if "mpirun detected" in output or "has been aborted" in output:
        fail(f"mpirun reported the stopped job as failed:\n{output[-3000:]}")
    m = re.search(r"stopped by (SIG\w+|the --time-limit of \S+ minutes) "
                  r"after step (\d+) of (\d+): saved "
                  r"(\S+); resume with --load-checkpoint (\S+) --steps (\d+)",
                  output)
    if not m:
        fail(f"no 'stopped by ... saved ...' message:\n{output[-3000:]}")
    k = int(m.group(2))
    saved = m.group(4)
    reason = m.group(1)
    wanted = (f"the --time-limit of {args.time_limit:g} minutes",) \
        if not sig else (f"SIG{args.signal}", "SIGUSR1")
    if reason not in wanted:
        fail(f"stopped by {reason}, not {' or '.join(wanted)} (SIGUSR1: what "
             "loom passes on to mpirun)")
    if k < args.after or int(m.group(3)) != TOTAL or \
            int(m.group(6)) != TOTAL - k or m.group(5) != saved or \
            saved != ckpt.format(step=k):
        fail(f"unexpected message: {m.group(0)}")
    logged = steps_of(log)
    summary = [r for r in records(log) if r.get("summary")]
    if [r["step"] for r in logged] != list(range(k)):
        fail(f"logged steps {[r['step'] for r in logged]}, expected 0..{k - 1}")
    if not summary or summary[0].get("steps") != k or \
            summary[0].get("stopped_by") != \
            (reason if sig else "time limit"):
        fail(f"summary {summary}")
    if not os.path.exists(saved):
        fail(f"no checkpoint {saved}")

    # 3. Resumed = uninterrupted.
    resumed_log = os.path.join(args.out, "resumed.jsonl")
    resumed = os.path.join(args.out, "resumed.safetensors")
    run(command + ["--load-checkpoint", saved, "--steps", str(MORE),
                   "--log-json", resumed_log, "--save-checkpoint", resumed]
        + schedule, "the resumed run")
    whole_log = os.path.join(args.out, "whole.jsonl")
    whole = os.path.join(args.out, "whole.safetensors")
    run(command + ["--steps", str(k + MORE), "--log-json", whole_log,
                   "--save-checkpoint", whole] + schedule,
        "the uninterrupted run")
    keys = ("step", "loss", "grad_norm", "lr")
    parts = [tuple(r.get(x) for x in keys)
             for r in logged + steps_of(resumed_log)]
    reference = [tuple(r.get(x) for x in keys) for r in steps_of(whole_log)]
    if parts != reference:
        fail(f"interrupted + resumed {parts} != uninterrupted {reference}")
    if not filecmp.cmp(resumed, whole, shallow=False):
        fail("the resumed run's final weights differ from the uninterrupted "
             "run's")
    what = f"SIG{args.signal}" if sig else f"--time-limit {args.time_limit:g}"
    when = f" (signalled after {args.after})" if sig else ""
    print(f"{what}: stopped by {reason} after step {k}{when}, exit "
          f"{child.returncode}, checkpoint of step {k}; resumed {MORE} steps "
          f"= uninterrupted {k + MORE}: PASS")


if __name__ == "__main__":
    main()
