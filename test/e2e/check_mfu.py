"""Checks a loom-run --log-json file's MFU against the model's FLOPs.

usage: check_mfu.py LOG CONFIG PEAK_TFLOPS DEVICES SEQ [PADDED_VOCAB]

Every training step's "mfu", and the summary's (over the steps after the
first, whose mean tokens_per_s is checked too), must be (6N + 6 L C T) *
tokens_per_s / (PEAK_TFLOPS 1e12 DEVICES), with N the GPT-2 parameter count computed here
from the config (the vocabulary padded to PADDED_VOCAB rows when given), as
llm.c counts it: wte, wpe, per layer 12 C^2 + 13 C, ln_f.
"""
import json
import sys


def main():
    log, config, peak, devices, seq = sys.argv[1:6]
    cfg = json.load(open(config))
    V = int(sys.argv[6]) if len(sys.argv) > 6 else cfg["vocab_size"]
    C, L, P = cfg["n_embd"], cfg["n_layer"], cfg["n_positions"]
    n = V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C
    flops = 6 * n + 6 * L * C * int(seq)
    lines = [json.loads(line) for line in open(log)]
    steps = [s for s in lines if "step" in s and "tokens_per_s" in s]
    summary = [s for s in lines if s.get("summary")]
    assert steps, "no steps in " + log
    assert len(summary) == 1, "no summary in " + log

    def check(what, entry):
        want = flops * entry["tokens_per_s"] / (float(peak) * 1e12 * int(devices))
        got = entry.get("mfu")
        assert got is not None, what + " has no mfu"
        assert abs(got - want) <= 1e-9 * want, (
            "%s: mfu %r, want %r" % (what, got, want))

    for s in steps:
        check("step %d" % s["step"], s)
    # The summary's throughput: the steps after the first (all tokens over
    # all their time), and its MFU from that.
    tokens = steps[0]["tokens_per_s"] * steps[0]["step_ms"] / 1e3
    timed = steps[1:] if len(steps) > 1 else steps
    want = len(timed) * tokens / (sum(s["step_ms"] for s in timed) / 1e3)
    got = summary[0]["tokens_per_s"]
    assert abs(got - want) <= 1e-6 * want, (
        "summary tokens_per_s %r, want %r" % (got, want))
    check("summary", summary[0])
    print("mfu ok: %d steps, N = %d, %d FLOPs per token" % (len(steps), n, flops))


if __name__ == "__main__":
    main()
