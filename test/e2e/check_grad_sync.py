#!/usr/bin/env python3
"""Traffic of data-parallel gradients reduced once per step vs per micro-batch.

Reads --loom-report JSON files: DDP and ZeRO-1 with reduce-once-per-step
true and false, and the report of `loom compile`'s DDP program. Prints the
ratios; exits non-zero when DDP's once-per-step traffic is not about 1/M of
the per-micro-batch one (only the loss's scalar all-reduce stays per
micro-batch), when ZeRO-1 sends more than 0.1% over DDP (reduce-scatter +
all-gather = all-reduce; only its norm's scalar is extra), or
when `loom compile` placed the reductions otherwise.
"""

import json
import sys


def total(path):
    sent = json.load(open(path))["sent_bytes_per_step"]
    return sum(sent.values())


def main():
    ddp_once, ddp_each, z1_once, z1_each, compiled = sys.argv[1:6]
    ddp, ddp_old = total(ddp_once), total(ddp_each)
    z1, z1_old = total(z1_once), total(z1_each)
    ratio = ddp / ddp_old
    print(f"DDP M=4: once per step {ddp} bytes, per micro-batch {ddp_old} "
          f"bytes: {ratio:.3f} x")
    print(f"ZeRO-1 M=4: once per step {z1} bytes = {z1 / ddp:.3f} x DDP; "
          f"per micro-batch {z1_old} bytes")
    failures = []
    if not 0.25 <= ratio < 0.26:
        failures.append(f"DDP once-per-step traffic is {ratio:.3f} x, not ~1/4")
    if not ddp <= z1 <= 1.001 * ddp:
        failures.append(f"ZeRO-1 sends {z1} bytes, DDP {ddp}")
    if z1_old <= ddp_old:  # M all-reduces and the all-gather
        failures.append("per-micro-batch ZeRO-1 should send more than DDP")
    if json.load(open(compiled))["sent_bytes_per_step"] != \
            json.load(open(ddp_once))["sent_bytes_per_step"]:
        failures.append("loom compile's DDP program sends other bytes")
    for f in failures:
        print("FAIL:", f)
    if failures:
        return 1
    print("loom compile agrees")
    return 0


if __name__ == "__main__":
    sys.exit(main())
