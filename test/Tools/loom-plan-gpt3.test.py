"""Checks the best plan `loom plan --json` printed for GPT-3 175B on 64 GPUs:
the mesh covers the GPUs, tp <= 8 (one node), the predicted peak fits in
80 GB, every key of the plan format is there, and the figures agree with
each other (peak = the largest stage, MFU = model FLOPs / (step x G x peak),
bubble = (p-1)/v / (m + (p-1)/v))."""
import json
import sys

plan = json.load(open(sys.argv[1]))
mesh = plan["mesh"]
dp, tp, pp = mesh["dp"], mesh["tp"], mesh["pp"]
print(f"mesh dp={dp} tp={tp} pp={pp} covers {dp * tp * pp} GPUs")
print("tp <= 8:", "yes" if tp <= 8 else "no")
print("fits:", "yes" if plan["predicted_peak_bytes_per_gpu"] <= 80e9 else "no")
keys = ["mesh", "zero", "microbatches", "schedule", "virtual_stages",
        "recompute", "predicted_peak_bytes_per_gpu", "predicted_step_s",
        "predicted_mfu"]
print("keys:", " ".join(k for k in keys if k in plan))
print("Phi =", plan["model"]["params"])

ok = True
stages = plan["memory"]["stages"]
ok &= len(stages) == pp and sum(s["layers"] for s in stages) == 96
ok &= max(s["peak_bytes"] for s in stages) == plan["predicted_peak_bytes_per_gpu"]
flops = (6 * 174604259328 + 6 * 96 * 12288 * 2048) * 512 * 2048
mfu = flops / (plan["predicted_step_s"] * 64 * 989e12)
ok &= abs(mfu - plan["predicted_mfu"]) < 1e-9
m, v = plan["microbatches"], plan["virtual_stages"]
bubble = (pp - 1) / v / (m + (pp - 1) / v)
ok &= abs(bubble - plan["predicted_bubble"]) < 1e-12
ok &= 512 % (dp * m) == 0
ok &= plan["schedule"] in ("gpipe", "1f1b", "interleaved")
ok &= plan["recompute"] in ("none", "selective", "full")
ok &= 0 <= plan["zero"] <= 3 and 0 < plan["predicted_mfu"] < 1
print("plan is consistent" if ok else "PLAN IS INCONSISTENT")
sys.exit(0 if ok else 1)
