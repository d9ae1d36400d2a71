"""Prints each ZeRO stage's model state per Φ and traffic relative to DDP
from --loom-report JSON files (stages 0..3 in order), and checks them
against the ZeRO paper's formulas (bf16 mixed precision: 16Φ, 4Φ+12Φ/N,
2Φ+14Φ/N, 16Φ/N; fp32: 16Φ, 8Φ+8Φ/N, 4Φ+12Φ/N, 16Φ/N; ZeRO-1 and
ZeRO-2 traffic 1.0× DDP and ZeRO-3 1.5× DDP within 1%)."""
import json
import sys

reports = [json.load(open(path)) for path in sys.argv[1:5]]
phi = reports[0]["global_params"]
n = reports[0]["ranks"]
print(f"Phi = {phi}, dp = {n}")
ddp = sum(reports[0]["sent_bytes_per_step"].values())
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
for stage, factor in ((1, 1.0), (2, 1.0), (3, 1.5)):
    ok &= abs(sum(reports[stage]["sent_bytes_per_step"].values()) / ddp -
              factor) < 0.01
print("formulas hold" if ok else "FORMULAS DO NOT HOLD")
sys.exit(0 if ok else 1)
