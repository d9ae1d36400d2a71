#!/usr/bin/env python3
"""Checks that a mixed-precision checkpoint holds fp32 master weights.

    check_masters.py CHECKPOINT.safetensors

Prints the dtypes of the weights (optimizer.* left out) and how many of
their values are finer than bf16 (low 16 bits not zero): a checkpoint of
the bf16 copies would have none. Exit 1 when a weight is not F32 or every
value is bf16-representable.
"""
import json
import struct
import sys


def main():
    with open(sys.argv[1], "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes, finer, total = set(), 0, 0
    for name, t in header.items():
        if name == "__metadata__" or name.startswith("optimizer."):
            continue
        dtypes.add(t["dtype"])
        begin, end = t["data_offsets"]
        words = struct.unpack(f"<{(end - begin) // 4}I", data[begin:end])
        finer += sum(1 for w in words if w & 0xFFFF)
        total += len(words)
    print(f"weights: {' '.join(sorted(dtypes))}, {finer} of {total} values "
          f"finer than bf16")
    ok = dtypes == {"F32"} and finer > 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
