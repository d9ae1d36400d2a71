"""Checks the bf16 mixed-precision --loom-report JSON of each ZeRO stage
(PREFIX.bf16.z0.json .. z3) against the ZeRO paper (16Φ, 4Φ+12Φ/N,
2Φ+14Φ/N, 16Φ/N, exactly) and against the fp32 reports (PREFIX.fp32.zN):
the measured state equals the report's own mixed-precision figure, and
every collective kind sends half the fp32 bytes, apart from the f32 scalar
all-reduces (loss, sum of squares), which are the same."""
import json
import sys

prefix = sys.argv[1]
load = lambda p, z: json.load(open(f"{prefix}.{p}.z{z}.json"))
bf16 = [load("bf16", z) for z in range(4)]
fp32 = [load("fp32", z) for z in range(4)]
phi = bf16[0]["global_params"]
n = bf16[0]["ranks"]
print(f"Phi = {phi}, dp = {n}")
want = [16, 4 + 12 / n, 2 + 14 / n, 16 / n]
ok = halved = True
for z in range(4):
    b, f = bf16[z], fp32[z]
    assert b["precision"] == "bf16" and f["precision"] == "fp32"
    assert b["global_params"] == phi == f["global_params"]
    state = b["model_state_bytes"] / phi
    ok &= abs(state - want[z]) < 1e-9
    ok &= b["model_state_bytes"] == b["model_state_bytes_bf16_mixed"]
    ok &= b["model_state_bytes"] == f["model_state_bytes_bf16_mixed"]
    sent = []
    for kind in sorted(b["sent_bytes_per_step"]):
        mixed, full = b["sent_bytes_per_step"][kind], f["sent_bytes_per_step"][kind]
        if not full:
            continue
        sent.append(f"{kind} {mixed} (fp32 {full})")
        # The f32 scalar all-reduces (loss, sum of squares) send the same
        # bytes s in both; tensors halve: full = T + s, mixed = T/2 + s.
        scalars = 2 * mixed - full
        halved &= (0 <= scalars < 64) if kind == "all_reduce" else scalars == 0
    print(f"stage {z}: bf16 {state:.2f} Phi (want {want[z]:.2f}), sent "
          + ", ".join(sent))
print(("formulas hold" if ok else "FORMULAS DO NOT HOLD") + "; " +
      ("tensor traffic halved" if halved else "TRAFFIC NOT HALVED"))
sys.exit(0 if ok and halved else 1)
