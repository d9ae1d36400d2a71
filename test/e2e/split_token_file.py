"""Splits a token file into shards that read as the file does.

  split_token_file.py SRC OUT_PREFIX --batch B --seq T --batches 3,1,6

Shard k (OUT_PREFIX_00k.bin) holds batches [b_k, b_k + n_k) of B x T of SRC
and the one token after them (the last batch's last target), so a shard
starts with the token the previous one ends with: reading the shards one
after another (loom's --data 'OUT_PREFIX_*.bin') gives SRC's first
sum(n_k) batches in file order, which a run on SRC itself must match
bitwise. numpy only (loomfmt).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loomfmt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("src")
    ap.add_argument("prefix")
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--batches", required=True,
                    help="comma-separated batches per shard")
    args = ap.parse_args()
    tokens = loomfmt.read_token_file(args.src)
    bt = args.batch * args.seq
    counts = [int(n) for n in args.batches.split(",")]
    if sum(counts) > loomfmt.batches_per_epoch(len(tokens), args.batch,
                                               args.seq):
        sys.exit(f"split_token_file: {args.src} holds fewer than "
                 f"{sum(counts)} batches of {args.batch} x {args.seq}")
    first = 0
    for k, n in enumerate(counts):
        shard = tokens[first * bt:(first + n) * bt + 1]
        loomfmt.write_token_file(f"{args.prefix}_{k:03d}.bin", shard)
        first += n
    print(f"{len(counts)} shards, {first} batches")


if __name__ == "__main__":
    main()
