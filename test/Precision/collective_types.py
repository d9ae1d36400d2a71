"""Counts the collectives of a compiled IR file by kind, mesh axes and the
element types they move ("bf16", "f32", or "f32 scalar"), one line each,
sorted: what FileCheck reads to see that mixed precision's collectives
carry bf16 (half of fp32's bytes) and only scalars stay f32."""
import collections
import re
import sys

KINDS = ("group_all_reduce", "all_reduce", "all_gather", "reduce_scatter",
         "all_to_all", "send", "recv")
counts = collections.Counter()
for line in open(sys.argv[1]):
    m = re.search(r"loom\.(%s) .*?\[([a-z, ]*)\]" % "|".join(KINDS), line)
    if not m:
        continue
    types = line.rsplit(" : ", 1)[1]
    kinds = set(re.findall(r"tensor<[0-9x]+x(bf16|f32)>", types))
    kinds |= {t + " scalar" for t in re.findall(r"tensor<(bf16|f32)>", types)}
    counts[(m.group(1), m.group(2).replace(" ", ""), "+".join(sorted(kinds)))] += 1
for (kind, axes, types), n in sorted(counts.items()):
    print(f"{kind} [{axes}] {types}: {n}")
