"""Prints each ZeRO stage's model state per Φ and traffic relative to DDP
from --loom-report JSON files (stages 0..3 in order), and checks them
against the ZeRO paper's formulas (bf16 mixed precision: 16Φ, 4Φ+12Φ/N,
2Φ+14Φ/N, 16Φ/N; fp32: 16Φ, 8Φ+8Φ/N, 4Φ+12Φ/N, 16Φ/N; ZeRO-1 and
ZeRO-2 traffic 1.0× DDP and ZeRO-3 1.5× DDP within 1%, less one gather
of the tensors outside the blocks, which ZeRO-3 gathers for the forward
only: the head runs its backward on the copy its forward gathered, and the
embedding's backward needs no table). The last argument: the model's
config, for the size of those tensors."""
import json
import sys

reports = [json.load(open(path)) for path in sys.argv[1:5]]
config = json.load(open(sys.argv[5]))
phi = reports[0]["global_params"]
n = reports[0]["ranks"]
print(f"Phi = {phi}, dp = {n}")
ddp = sum(reports[0]["sent_bytes_per_step"].values())
# wte, wpe and ln_f (fp32), gathered once per step instead of twice.
outside = (config["vocab_size"] + config["n_positions"] + 2) * config["n_embd"]
not_regathered = (n - 1) / n * 4 * outside
want_mixed = [16, 4 + 12 / n, 2 + 14 / n, 16 / n]
want_fp32 = [16, 8 + 8 / n, 4 + 12 / n, 16 / n]
ok = True
for stage, report in enumerate(reports):
    assert report["global_params"] == phi, "same model in every report"
    fp32 = report["model_state_bytes"] / phi
    mixed = report["model_state_bytes_bf16_mixed"] / phi
    sent = sum(report["sent_bytes_per_step"].values())
    print(f"stage {stage}: fp32 {fp32:.2f} Phi, bf16 mixed {mixed:.2f} Phi, "
          f"sent {sent} bytes = {sent / ddp:.2f} x DDP")
    ok &= abs(fp32 - want_fp32[stage]) < 1e-9
    ok &= abs(mixed - want_mixed[stage]) < 1e-9
for stage, factor in ((1, 1.0), (2, 1.0),
                      (3, 1.5 - not_regathered / ddp)):
    ok &= abs(sum(reports[stage]["sent_bytes_per_step"].values()) / ddp -
              factor) < 0.01
print(f"ZeRO-3 formula: 1.5 x DDP - {not_regathered:.0f} bytes = "
      f"{1.5 - not_regathered / ddp:.2f} x DDP")
print("formulas hold" if ok else "FORMULAS DO NOT HOLD")
sys.exit(0 if ok else 1)
