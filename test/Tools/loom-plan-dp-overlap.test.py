"""Runs `loom plan --json` on fixed plans of GPT-2 124M and checks where
the step time puts the data-parallel reductions (see
loom-plan-dp-overlap.test): the time exposed against the ring bytes over
the link bandwidth, and the reason given. Prints one line per plan.
Arguments: the loom binary, the examples directory."""
import json
import os
import subprocess
import sys

loom, examples = sys.argv[1:3]
# --intra-node-gbps default (NVLink per direction), bytes/s.
BANDWIDTH = 450e9
# PlanModel.h's kOverlapCost: the hidden part still costs this much.
OVERLAP_COST = 0.2


def plan(mesh, zero, micro, *flags):
    out = subprocess.run(
        [loom, "plan", "--config", os.path.join(examples, "gpt2-124m.json"),
         "--gpus", "8", "--gpu-mem-gb", "1e6", "--batch", "64", "--seq",
         "1024", "--mesh", mesh, "--zero", str(zero), "--microbatches",
         str(micro), "--recompute", "none", "--json", *flags],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


ok = True
# (mesh, zero, micro-batches, extra flags, how the exposed time must relate
# to the dp traffic time T = dp bytes / bandwidth).
CASES = [
    # DDP: the bucketed all-reduces run behind the backward (GPT-2 124M's
    # backward is longer than them), of the one micro-batch or of the last
    # of several (no_sync before it), in a pipeline of each chunk's last.
    ("dp=8", 0, 1, (), "hidden"),
    ("dp=8", 0, 4, (), "hidden"),
    ("dp=4,pp=2", 0, 4, ("--schedule", "1f1b"), "hidden"),
    # ZeRO-1: reduce-scatters in place in the last micro-batch's backward
    # (one micro-batch too), behind the rest of it, and the all-gather after
    # the optimizer, exposed.
    ("dp=8", 1, 1, (), "scatter hidden, gather"),
    ("dp=8", 1, 4, (), "scatter hidden, gather"),
    ("dp=4,pp=2", 1, 4, ("--schedule", "1f1b"), "scatter hidden, gather"),
    # ZeRO-2: the all-gather after the optimizer only (its per-micro-batch
    # reduce-scatters run behind each backward).
    ("dp=8", 2, 4, (), "gather"),
    # ZeRO-3: nothing once per step.
    ("dp=8", 3, 4, (), "none"),
]
for mesh, zero, micro, flags, expect in CASES:
    got = plan(mesh, zero, micro, *flags)
    exposed = got["predicted_dp_exposed_s"]
    total = got["predicted_dp_traffic_s"]
    dp_bytes = got["traffic_bytes_per_gpu_per_step"]["dp"]
    params = got["memory"]["params_per_gpu"]
    n = got["mesh"]["dp"]
    if expect == "hidden":
        want = OVERLAP_COST * total
    elif expect == "exposed":
        # The whole traffic, which is the ring bytes over the bandwidth.
        want = dp_bytes / BANDWIDTH
        ok &= abs(total - want) <= 1e-9 * want
    elif expect == "gather":
        # All-gather of the rank's bf16 parameters: (n-1)/n x 2 bytes each.
        want = (n - 1) / n * 2 * params / BANDWIDTH
    elif expect == "scatter hidden, gather":
        # The all-gather as above, exposed; the rest of the traffic (the
        # reduce-scatters) hidden at the overlap cost.
        gather = (n - 1) / n * 2 * params / BANDWIDTH
        want = gather + OVERLAP_COST * (total - gather)
    else:
        want = 0.0
    good = abs(exposed - want) <= 1e-9 * max(want, 1e-12)
    ok &= good
    print(f"{mesh:<10} zero={zero} mb={micro}: dp {exposed * 1e3:.3f} ms "
          f"exposed of {total * 1e3:.3f} ms ({expect}"
          f"{'' if good else ', WRONG: want %.3f ms' % (want * 1e3)}) "
          f"because {got['dp_exposed_because']}")
print("dp reductions placed as the compiled step places them" if ok
      else "DP REDUCTIONS MISPLACED")
sys.exit(0 if ok else 1)
