"""The logged lr of each schedule of train-lr-schedules.test vs its formula."""
import json
import math
import sys

out = sys.argv[1]
LR, MIN, W, S = 2e-3, 2e-4, 2, 12


def lrs(name):
    return [r["lr"] for r in map(json.loads, open(f"{out}/{name}.jsonl"))
            if "lr" in r]


def expected(kind, s, f=0.4):
    if s < W:
        return LR * (s + 1) / W
    p = min(max((s - W) / max(1, S - W), 0.0), 1.0)
    if kind == "cosine":
        return MIN + 0.5 * (1 + math.cos(math.pi * p)) * (LR - MIN)
    if kind == "linear":
        return MIN + (1 - p) * (LR - MIN)
    if p <= 1 - f:
        return LR
    return MIN + (1 - min(1.0, (p - (1 - f)) / f)) * (LR - MIN)


def check(label, got, kind):
    want = [expected(kind, s) for s in range(len(got))]
    ok = len(got) == 12 and all(abs(a - b) <= 1e-12 for a, b in zip(got, want))
    print(f"{label}: {'PASS' if ok else f'FAIL {got} vs {want}'}")


wsd = lrs("wsd")
tail = ", ".join(f"{x:.3g}" for x in wsd[9:])
print(f"wsd: 2e-3 through step 8, then {tail} (2e-4 at step 12): "
      f"{'PASS' if wsd[2:9] == [LR] * 7 else 'FAIL'}")
check("wsd", wsd, "wsd")
check("linear", lrs("linear"), "linear")
check("cosine", lrs("cosine"), "cosine")
check("resumed wsd", lrs("first") + lrs("second"), "wsd")
