#!/usr/bin/env python3
"""Where a DDP or ZeRO-1 step with several micro-batches reduces its
gradients.

Reads one rank's Chrome trace of `loom train --trace` and the program dump
(`loom-translate --loom-program-dump`) of the same step. The program's
last-micro-batch all-reduces (DDP's no_sync) or in-place reduce-scatters
(ZeRO-1's, as Megatron's distributed optimizer) must run once per step, in
the last micro-batch (after its loss, the last "loss" communication event
of the step), and the first of them must start while that micro-batch's
backward still computes (a compute event follows it before the update):
the reduction overlaps the backward instead of waiting for the update.
Prints one line per step and exits non-zero when any step differs.
Arguments: the trace file, the program dump, the micro-batch count.
"""

import json
import sys


def main():
    trace_path, dump_path, microbatches = sys.argv[1], sys.argv[2], int(sys.argv[3])
    buckets = sum(1 for line in open(dump_path)
                  if (" AllReduce " in line or " ReduceScatter " in line)
                  and "last_microbatch_only" in line)
    events = json.load(open(trace_path))["traceEvents"]
    events.sort(key=lambda e: e["ts"])
    # A step starts where its batch is loaded.
    steps, current = [], None
    for e in events:
        if e["cat"] == "data" and e["name"].startswith("load batch"):
            current = []
            steps.append(current)
        elif current is not None:
            current.append(e)
    ok = buckets > 0 and len(steps) > 0
    for n, step in enumerate(steps, 1):
        losses = [i for i, e in enumerate(step)
                  if e["cat"] == "communication" and e["name"] == "loss"]
        syncs = [i for i, e in enumerate(step)
                 if e["cat"] == "communication" and e["name"].endswith(".grad_sync")]
        update = next((i for i, e in enumerate(step) if e["cat"] == "optimizer"),
                      len(step))
        after_first = [e for e in step[syncs[0] + 1:update]
                       if e["cat"] == "compute"] if syncs else []
        good = (len(losses) == microbatches and len(syncs) == buckets and
                all(losses[-1] < i < update for i in syncs) and
                len(after_first) > 0)
        ok &= good
        print(f"step {n}: {len(syncs)} of {buckets} last-micro-batch "
              f"reductions, after micro-batch {len(losses)}'s loss, the first "
              f"launched {len(after_first)} backward instructions before the "
              f"update{'' if good else ' WRONG'}")
    print("PASS" if ok else "FAIL")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
