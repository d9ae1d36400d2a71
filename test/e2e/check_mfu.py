"""Checks a loom-run --log-json file's MFU against the model's FLOPs.

usage: check_mfu.py LOG CONFIG PEAK_TFLOPS DEVICES SEQ [PADDED_VOCAB]

Every training step's "mfu" must be (6N + 6 L C T) * tokens_per_s /
(PEAK_TFLOPS 1e12 DEVICES), with N the GPT-2 parameter count computed here
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
    steps = [json.loads(line) for line in open(log)]
    steps = [s for s in steps if "tokens_per_s" in s]
    assert steps, "no steps in " + log
    for s in steps:
        want = flops * s["tokens_per_s"] / (float(peak) * 1e12 * int(devices))
        got = s.get("mfu")
        assert got is not None, "step %d has no mfu" % s["step"]
        assert abs(got - want) <= 1e-9 * want, (
            "step %d: mfu %r, want %r" % (s["step"], got, want))
    print("mfu ok: %d steps, N = %d, %d FLOPs per token" % (len(steps), n, flops))


if __name__ == "__main__":
    main()
