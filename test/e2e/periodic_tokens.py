"""Writes an llm.c / nanoGPT token file whose tokens repeat with period T:
the first T tokens of SOURCE, N times. Every row a step reads starts at a
multiple of T (step s at s*B*T, row r at r*T), so every row of every batch
is the same sequence, with the same targets: a gradient accumulated over M
micro-batches (or summed over data-parallel ranks) is then M (or dp) equal
parts, exactly representable once widened to fp32."""
import argparse
import struct

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("source", help="token file to take the first T tokens of")
parser.add_argument("out", help="token file to write")
parser.add_argument("--period", type=int, required=True, help="T")
parser.add_argument("--repeats", type=int, default=64, help="N")
args = parser.parse_args()

with open(args.source, "rb") as f:
    header = struct.unpack("<256i", f.read(1024))
    if header[0] != 20240520 or header[1] != 1:
        raise SystemExit(f"{args.source}: not a version-1 token file")
    tokens = struct.unpack(f"<{args.period}H", f.read(2 * args.period))
count = args.period * args.repeats
with open(args.out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, count, *([0] * 253)))
    f.write(struct.pack(f"<{count}H", *(tokens * args.repeats)))
