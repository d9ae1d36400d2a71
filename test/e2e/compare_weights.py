#!/usr/bin/python3
"""compare_weights: compares the weights of two safetensors checkpoints.

  compare_weights.py A.safetensors B.safetensors [--rtol 1e-3]
      [--include-optimizer] [--exclude REGEX]

For every tensor name (HF GPT-2 names; a "transformer." prefix is dropped,
optimizer.* tensors are ignored unless --include-optimizer) prints

    rel = max|a - b| / max|b|

the largest difference relative to B's scale (not element-wise: an
element-wise ratio explodes on weights near zero, which Adam moves by up to
lr per step), plus max|a - b|. PASS when every tensor has rel <= rtol and
both files hold the same names and shapes; otherwise FAIL and exit 1.
numpy only (loomfmt): run it with /usr/bin/python3 (or any python3 with numpy).
"""
import argparse
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loomfmt  # noqa: E402

PROG = "compare_weights"


def load(path, include_optimizer):
    tensors, _ = loomfmt.read_safetensors(path)
    out = {}
    for name, value in tensors.items():
        if name.startswith("optimizer.") and not include_optimizer:
            continue
        if name.startswith("transformer."):
            name = name[len("transformer."):]
        out[name] = np.asarray(value, dtype=np.float64)
    return out


def compare(a, b, rtol, stream=None):
    """Prints the per-tensor table; returns (ok, worst rel)."""
    stream = stream or sys.stdout
    ok, worst = True, 0.0
    width = max([len(n) for n in set(a) | set(b)] + [6])
    print(f"{'tensor':<{width}}  {'max|a-b|':>10}  {'rel':>10}", file=stream)
    for name in sorted(set(a) | set(b)):
        if name not in a or name not in b:
            print(f"{name:<{width}}  only in {'B' if name not in a else 'A'}",
                  file=stream)
            ok = False
            continue
        x, y = a[name], b[name]
        if x.shape != y.shape:
            print(f"{name:<{width}}  shape {list(x.shape)} vs {list(y.shape)}",
                  file=stream)
            ok = False
            continue
        diff = float(np.max(np.abs(x - y))) if x.size else 0.0
        scale = float(np.max(np.abs(y))) if y.size else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else np.inf)
        bad = not rel <= rtol  # NaN counts as bad
        ok &= not bad
        worst = max(worst, rel) if not np.isnan(rel) else np.nan
        print(f"{name:<{width}}  {diff:>10.3e}  {rel:>10.3e}"
              + ("  > rtol" if bad else ""), file=stream)
    return ok, worst


def main(argv=None):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--exclude", default=None, metavar="REGEX",
                    help="skip tensors whose name matches (say why where "
                         "you use it)")
    ap.add_argument("--include-optimizer", action="store_true",
                    help="also compare optimizer.* tensors")
    args = ap.parse_args(argv)
    try:
        a = load(args.a, args.include_optimizer)
        b = load(args.b, args.include_optimizer)
        if args.exclude:
            pattern = re.compile(args.exclude)
            a = {k: v for k, v in a.items() if not pattern.search(k)}
            b = {k: v for k, v in b.items() if not pattern.search(k)}
    except loomfmt.FormatError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1
    if not a and not b:
        print(f"{PROG}: error: no tensors to compare", file=sys.stderr)
        return 1
    ok, worst = compare(a, b, args.rtol)
    print(f"{'PASS' if ok else 'FAIL'}: {len(set(a) | set(b))} tensor(s), "
          f"max rel {worst:.3e}, rtol {args.rtol:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
