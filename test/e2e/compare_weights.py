#!/usr/bin/python3
"""compare_weights: compares the weights of two safetensors checkpoints.

  compare_weights.py A.safetensors B.safetensors [--rtol 1e-3]
      [--include-optimizer] [--exclude REGEX]
      [--adam-eps EPS [--adam-state C.safetensors]... [--beta2 B2]]

For every tensor name (HF GPT-2 names; a "transformer." prefix is dropped,
optimizer.* tensors are ignored unless --include-optimizer) prints

    rel = max|a - b| / max|b|

the largest difference relative to B's scale (not element-wise: an
element-wise ratio explodes on weights near zero, which Adam moves by up to
lr per step), plus max|a - b|. PASS when every tensor has rel <= rtol and
both files hold the same names and shapes; otherwise FAIL and exit 1.

--adam-eps EPS leaves out of a parameter's rel the elements where AdamW was
ill-conditioned: their gradient RMS sqrt(v_hat) (optimizer.exp_avg_sq,
bias-corrected with the checkpoint's "step" metadata and --beta2) is below
100*EPS in B or in any --adam-state checkpoint. There the update
m_hat / (sqrt(v_hat) + EPS) has a slope of up to 1/EPS in the gradient, so
fp32 round-off of a near-zero gradient (a different summation order under
data or tensor parallelism) moves the weight by a sizable part of lr, and
the offset stays. v_hat averages g^2 over the steps so far, so an element is
ill-conditioned at step t only if its gradient was near zero at every step
before: the first step (pass a 1-step checkpoint of the run as --adam-state)
is where it happens. The count left out is printed per tensor; the moments
themselves (linear in the gradients) are compared whole with
--include-optimizer.
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


def adam_noise_masks(path, eps, beta2):
    """{param name: bool array, True where AdamW is well-conditioned}."""
    tensors, metadata = loomfmt.read_safetensors(path)
    try:
        step = int(metadata["step"])
    except (KeyError, ValueError):
        raise loomfmt.FormatError(f"{path}: --adam-eps needs the checkpoint's "
                                  "\"step\" metadata (optimizer state)")
    prefix = "optimizer.exp_avg_sq."
    masks = {}
    for name, value in tensors.items():
        if not name.startswith(prefix) or step < 1:
            continue
        v_hat = np.asarray(value, dtype=np.float64) / (1.0 - beta2 ** step)
        masks[name[len(prefix):]] = np.sqrt(v_hat) >= 100.0 * eps
    if not masks:
        raise loomfmt.FormatError(f"{path}: --adam-eps needs optimizer state "
                                  "(optimizer.exp_avg_sq.*)")
    return masks


def compare(a, b, rtol, stream=None, masks=None):
    """Prints the per-tensor table; returns (ok, worst rel). `masks` keeps,
    per tensor, only the elements where it is True in the difference."""
    stream = stream or sys.stdout
    masks = masks or {}
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
        keep = masks.get(name)
        if keep is not None and keep.shape != x.shape:
            keep = None
        left_out = 0 if keep is None else int(keep.size - keep.sum())
        delta = np.abs(x - y) if keep is None else np.abs(x - y)[keep]
        diff = float(np.max(delta)) if delta.size else 0.0
        scale = float(np.max(np.abs(y))) if y.size else 0.0
        rel = diff / scale if scale > 0 else (0.0 if diff == 0 else np.inf)
        bad = not rel <= rtol  # NaN counts as bad
        ok &= not bad
        worst = max(worst, rel) if not np.isnan(rel) else np.nan
        print(f"{name:<{width}}  {diff:>10.3e}  {rel:>10.3e}"
              + ("  > rtol" if bad else "")
              + (f"  ({left_out} ill-conditioned left out)" if left_out
                 else ""), file=stream)
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
    ap.add_argument("--adam-eps", type=float, default=None, metavar="EPS",
                    help="leave out parameter elements whose gradient RMS "
                         "(B's AdamW state) is below 100*EPS")
    ap.add_argument("--adam-state", action="append", default=[],
                    metavar="CHECKPOINT",
                    help="with --adam-eps, also leave out the elements "
                         "ill-conditioned in this checkpoint's AdamW state")
    ap.add_argument("--beta2", type=float, default=0.999,
                    help="AdamW beta2 of the run (bias correction)")
    args = ap.parse_args(argv)
    try:
        a = load(args.a, args.include_optimizer)
        b = load(args.b, args.include_optimizer)
        masks = None
        if args.adam_eps:
            masks = adam_noise_masks(args.b, args.adam_eps, args.beta2)
            for path in args.adam_state:
                for name, keep in adam_noise_masks(path, args.adam_eps,
                                                   args.beta2).items():
                    if name in masks and masks[name].shape == keep.shape:
                        masks[name] = masks[name] & keep
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
    ok, worst = compare(a, b, args.rtol, masks=masks)
    print(f"{'PASS' if ok else 'FAIL'}: {len(set(a) | set(b))} tensor(s), "
          f"max rel {worst:.3e}, rtol {args.rtol:g}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
