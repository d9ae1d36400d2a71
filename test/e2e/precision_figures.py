#!/usr/bin/env python3
"""Prints an fp32 run's and a bf16 run's memory and traffic side by side.

    precision_figures.py FP32.jsonl BF16.jsonl

Both are loom-run --log-json logs of the same strategy; rank 0's summary
line gives, per figure, "NAME FP32 -> BF16 (xRATIO)": model_state_bytes and
sent_bytes_per_step per collective kind, then bf16_staging_bytes (the fp32
staging of bf16 operands the runtime reports next to the arena). Tests
FileCheck the exact numbers (mixed precision halves every tensor
collective; f32 scalars such as the loss are not halved).
"""
import json
import sys


def summary(path):
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if record.get("summary"):
                return record["ranks"][0]
    sys.exit(f"{path}: no summary line")


def main():
    fp32, bf16 = summary(sys.argv[1]), summary(sys.argv[2])

    def show(name, a, b):
        ratio = f"x{b / a:.4f}" if a else "-"
        print(f"{name} {a} -> {b} ({ratio})")

    show("model_state_bytes", fp32["model_state_bytes"],
         bf16["model_state_bytes"])
    for kind in sorted(fp32["sent_bytes_per_step"]):
        show(kind, fp32["sent_bytes_per_step"][kind],
             bf16["sent_bytes_per_step"][kind])
    print(f"bf16_staging_bytes {fp32['bf16_staging_bytes']} -> "
          f"{bf16['bf16_staging_bytes']}")


if __name__ == "__main__":
    main()
