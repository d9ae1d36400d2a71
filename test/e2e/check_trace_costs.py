#!/usr/bin/env python3
"""Checks a loom-run --trace's per-span costs (args.flops, args.bytes;
runtime/core/instruction_cost.h) against a GPT-2's shapes, worked out here
from its config rather than from the program:

  - every compute and optimizer span carries both, no communication span;
  - a step's FLOPs are the model's: (6 training, 2 evaluation) x tokens x
    (12·L·C² + V·C) for the GEMMs, plus (6 or 2) x L·C·T x tokens for
    causal attention, exactly (each step one micro-batch of B x T tokens);
  - the LM head's Matmul moves its lhs [B·T, C], its weight [V, C] and its
    logits [B·T, V] once each;
  - with --same-flops-as OTHER: OTHER (the same program run another way,
    e.g. with fused spans) has the same FLOPs every step; prints both runs'
    bytes per step and whether this one's are fewer.

usage: check_trace_costs.py TRACE --config F --batch B --seq T --vocab V
                            [--eval] [--dtype-bytes N] [--same-flops-as T2]
"""
import argparse
import json
import sys


def steps_of(path):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    steps, current = [], None
    for e in events:
        if e.get("cat") == "data":
            current = []
            steps.append(current)
        elif current is not None:
            current.append(e)
    return steps


def step_sums(step):
    flops = sum(e["args"].get("flops", 0) for e in step if "args" in e)
    nbytes = sum(e["args"].get("bytes", 0) for e in step if "args" in e)
    return flops, nbytes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True,
                    help="the compiled (padded) vocabulary")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--dtype-bytes", type=int, default=4,
                    help="bytes per element of the LM head's operands")
    ap.add_argument("--same-flops-as")
    a = ap.parse_args()
    cfg = json.load(open(a.config))
    L, C = cfg["n_layer"], cfg["n_embd"]
    B, T, V = a.batch, a.seq, a.vocab
    tokens = B * T
    passes = 2 if a.eval else 6
    want = passes * tokens * (12 * L * C * C + V * C) + passes * L * C * T * tokens

    steps = steps_of(a.trace)
    assert steps, "no steps in the trace"
    for s, step in enumerate(steps):
        for e in step:
            args = e.get("args", {})
            costed = "flops" in args and "bytes" in args
            if e["cat"] == "communication":
                assert "flops" not in args, e
            else:
                assert costed, f"step {s}: span without costs: {e}"
        flops, _ = step_sums(step)
        assert flops == want, f"step {s}: {flops} FLOPs, expected {want}"
        heads = [e for e in step if e["args"].get("op") == "Matmul"]
        assert len(heads) == 1, [e["name"] for e in heads]
        head_bytes = a.dtype_bytes * (tokens * C + V * C + tokens * V)
        assert heads[0]["args"]["bytes"] == head_bytes, (heads[0], head_bytes)
    print(f"{len(steps)} steps, each {want} FLOPs as the config gives; "
          f"LM head {head_bytes} bytes")
    flops, nbytes = step_sums(steps[-1])
    if a.same_flops_as:
        other = steps_of(a.same_flops_as)
        assert len(other) == len(steps), (len(other), len(steps))
        for s, (x, y) in enumerate(zip(steps, other)):
            assert step_sums(x)[0] == step_sums(y)[0], (s, step_sums(x),
                                                         step_sums(y))
        there = step_sums(other[-1])[1]
        print(f"same FLOPs every step; bytes per step {nbytes} here, "
              f"{there} there: {'fewer' if nbytes < there else 'not fewer'} "
              f"here")


if __name__ == "__main__":
    sys.exit(main())
