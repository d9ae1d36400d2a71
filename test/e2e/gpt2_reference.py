#!/usr/bin/python3
"""gpt2_reference: an independent PyTorch GPT-2 to check Loom's losses against.

Written from the math, not from Loom's code (nanoGPT-shaped): token +
position embeddings, n_layer pre-norm blocks
    x = x + attn(ln_1(x)),  x = x + mlp(ln_2(x)),
causal multi-head attention with scale 1/sqrt(head_size), tanh-GELU MLP of
width 4C, final ln_f, LM head tied to wte (logits = h @ wte.T), loss = mean
cross-entropy over all B*T tokens. float32 by default, --double for float64.
Linear layers follow HF's Conv1D layout: y = x @ W + b with W stored [in, out].

Run with Debian's torch interpreter:
  /usr/bin/python3 test/e2e/gpt2_reference.py --config C --checkpoint W \
      --data D --batch B --seq T --steps N [--out F] [--double]
  ... --compare LOOM_LOG.jsonl [--rtol 1e-4]    (exit 1 on mismatch)
  ... --init-check --config C [--data D ...]    (expected loss at init)

Step s evaluates the batch loomfmt.get_batch(tokens, B, T, s) with the
weights of the checkpoint (no update) and prints {"step": s, "loss": L}.
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loomfmt  # noqa: E402
from loomfmt import FormatError  # noqa: E402

PROG = "gpt2_reference"


#===----------------------------------------------------------------------===#
# Config and weights
#===----------------------------------------------------------------------===#

class GPT2Config:
    """The fields of an HF GPT-2 config.json the model needs."""

    def __init__(self, n_layer, n_head, n_embd, vocab_size, n_positions,
                 layer_norm_epsilon=1e-5):
        self.n_layer = n_layer
        self.n_head = n_head
        self.n_embd = n_embd
        self.vocab_size = vocab_size
        self.n_positions = n_positions
        self.layer_norm_epsilon = layer_norm_epsilon
        for field in ("n_layer", "n_head", "n_embd", "vocab_size",
                      "n_positions"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) \
                    or value < 1:
                raise FormatError(f"config: {field} must be a positive "
                                  f"integer, got {value!r}")
        if n_embd % n_head:
            raise FormatError(f"config: n_embd {n_embd} is not divisible by "
                              f"n_head {n_head}")
        if not isinstance(layer_norm_epsilon, (int, float)) \
                or not layer_norm_epsilon > 0:
            raise FormatError("config: layer_norm_epsilon must be a positive "
                              f"number, got {layer_norm_epsilon!r}")

    @classmethod
    def from_json(cls, path):
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
        except OSError as e:
            raise FormatError(f"cannot read config {path}: {e.strerror}")
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}: not valid JSON ({e})")
        if not isinstance(raw, dict):
            raise FormatError(f"{path}: config is not a JSON object")
        missing = [k for k in ("n_layer", "n_head", "n_embd", "vocab_size",
                               "n_positions") if k not in raw]
        if missing:
            raise FormatError(f"{path}: config lacks {', '.join(missing)}")
        try:
            return cls(raw["n_layer"], raw["n_head"], raw["n_embd"],
                       raw["vocab_size"], raw["n_positions"],
                       raw.get("layer_norm_epsilon", 1e-5))
        except FormatError as e:
            raise FormatError(f"{path}: {e}")

    def to_dict(self):
        return {"model_type": "gpt2", "n_layer": self.n_layer,
                "n_head": self.n_head, "n_embd": self.n_embd,
                "vocab_size": self.vocab_size,
                "n_positions": self.n_positions,
                "layer_norm_epsilon": self.layer_norm_epsilon}


def weight_shapes(cfg):
    """{HF GPT-2 name: shape} of every weight the model needs, in order."""
    C, V, P = cfg.n_embd, cfg.vocab_size, cfg.n_positions
    shapes = {"wte.weight": [V, C], "wpe.weight": [P, C]}
    for i in range(cfg.n_layer):
        h = f"h.{i}."
        shapes.update({
            h + "ln_1.weight": [C], h + "ln_1.bias": [C],
            h + "attn.c_attn.weight": [C, 3 * C], h + "attn.c_attn.bias": [3 * C],
            h + "attn.c_proj.weight": [C, C], h + "attn.c_proj.bias": [C],
            h + "ln_2.weight": [C], h + "ln_2.bias": [C],
            h + "mlp.c_fc.weight": [C, 4 * C], h + "mlp.c_fc.bias": [4 * C],
            h + "mlp.c_proj.weight": [4 * C, C], h + "mlp.c_proj.bias": [C],
        })
    shapes["ln_f.weight"] = [C]
    shapes["ln_f.bias"] = [C]
    return shapes


def select_weights(cfg, tensors, where="checkpoint"):
    """Picks the model's weights out of {name: array}.

    Accepts the bare HF names and the same names under "transformer." (as
    GPT2LMHeadModel saves them). Every other tensor (optimizer state, HF's
    attn.bias mask buffers, a tied lm_head.weight) is ignored. A missing
    weight or a shape that disagrees with the config raises FormatError.
    """
    weights = {}
    missing = []
    for name, shape in weight_shapes(cfg).items():
        value = tensors.get(name)
        if value is None:
            value = tensors.get("transformer." + name)
        if value is None:
            missing.append(name)
            continue
        if list(value.shape) != shape:
            raise FormatError(f"{where}: {name} has shape {list(value.shape)}, "
                              f"the config needs {shape}")
        weights[name] = value
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise FormatError(f"{where}: {len(missing)} weight(s) missing: {shown}")
    return weights


def load_weights(cfg, path, dtype=torch.float32):
    """{name: torch tensor of dtype} from a safetensors checkpoint."""
    tensors, _ = loomfmt.read_safetensors(path)
    weights = select_weights(cfg, tensors, where=path)
    return {k: torch.from_numpy(np.array(v)).to(dtype)
            for k, v in weights.items()}


def init_weights(cfg, seed=0, dtype=torch.float32):
    """GPT-2's init: N(0, 0.02) matrices and embeddings, the two residual
    projections scaled by 1/sqrt(2*n_layer), zero biases, unit LN gains."""
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in weight_shapes(cfg).items():
        if name.startswith(("ln_", "ln_f")) or ".ln_" in name:
            value = torch.ones(shape) if name.endswith("weight") \
                else torch.zeros(shape)
        elif name.endswith("bias"):
            value = torch.zeros(shape)
        else:
            std = 0.02
            if name.endswith("c_proj.weight"):
                std /= math.sqrt(2 * cfg.n_layer)
            value = torch.randn(shape, generator=gen, dtype=torch.float64) * std
        weights[name] = value.to(dtype)
    return weights


#===----------------------------------------------------------------------===#
# Model
#===----------------------------------------------------------------------===#

def layer_norm(x, weight, bias, eps):
    mean = x.mean(dim=-1, keepdim=True)
    var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)  # biased, as GPT-2
    return (x - mean) / torch.sqrt(var + eps) * weight + bias


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(
        math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def causal_attention(qkv, n_head):
    """qkv [B, T, 3C] -> [B, T, C]: softmax(q k^T / sqrt(hs) + mask) v."""
    B, T, C3 = qkv.shape
    C = C3 // 3
    hs = C // n_head
    q, k, v = qkv.split(C, dim=-1)
    q = q.view(B, T, n_head, hs).transpose(1, 2)  # [B, nh, T, hs]
    k = k.view(B, T, n_head, hs).transpose(1, 2)
    v = v.view(B, T, n_head, hs).transpose(1, 2)
    scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))
    future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
    scores = scores.masked_fill(future, float("-inf"))
    scores = scores - scores.amax(dim=-1, keepdim=True)
    probs = scores.exp()
    probs = probs / probs.sum(dim=-1, keepdim=True)
    y = probs @ v  # [B, nh, T, hs]
    return y.transpose(1, 2).reshape(B, T, C)


class GPT2:
    """Inference-only GPT-2 over a {HF name: tensor} weight dict."""

    def __init__(self, cfg, weights):
        self.cfg = cfg
        self.w = weights

    def hidden(self, idx):
        """idx [B, T] int64 -> final hidden states after ln_f, [B, T, C]."""
        cfg, w = self.cfg, self.w
        B, T = idx.shape
        if T > cfg.n_positions:
            raise FormatError(f"seq {T} exceeds n_positions {cfg.n_positions}")
        if int(idx.max()) >= cfg.vocab_size or int(idx.min()) < 0:
            raise FormatError(f"token id {int(idx.max())} outside vocab "
                              f"[0, {cfg.vocab_size})")
        eps = cfg.layer_norm_epsilon
        x = w["wte.weight"][idx] + w["wpe.weight"][:T].unsqueeze(0)
        for i in range(cfg.n_layer):
            h = f"h.{i}."
            a = layer_norm(x, w[h + "ln_1.weight"], w[h + "ln_1.bias"], eps)
            qkv = a @ w[h + "attn.c_attn.weight"] + w[h + "attn.c_attn.bias"]
            y = causal_attention(qkv, cfg.n_head)
            x = x + (y @ w[h + "attn.c_proj.weight"] + w[h + "attn.c_proj.bias"])
            m = layer_norm(x, w[h + "ln_2.weight"], w[h + "ln_2.bias"], eps)
            m = gelu_tanh(m @ w[h + "mlp.c_fc.weight"] + w[h + "mlp.c_fc.bias"])
            x = x + (m @ w[h + "mlp.c_proj.weight"] + w[h + "mlp.c_proj.bias"])
        return layer_norm(x, w["ln_f.weight"], w["ln_f.bias"], eps)

    def logits(self, idx):
        return self.hidden(idx) @ self.w["wte.weight"].T  # tied LM head

    def loss(self, idx, targets):
        """Mean cross-entropy over all B*T positions (log-softmax by hand)."""
        logits = self.logits(idx)
        logits = logits - logits.amax(dim=-1, keepdim=True)
        logz = logits.exp().sum(dim=-1).log()
        picked = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return (logz - picked).mean()


#===----------------------------------------------------------------------===#
# Runs
#===----------------------------------------------------------------------===#

def step_losses(model, tokens, batch, seq, steps):
    """[(step, loss)] for steps 0..steps-1, evaluated without updates."""
    out = []
    with torch.no_grad():
        for s in steps:
            x, y = loomfmt.get_batch(tokens, batch, seq, s)
            loss = model.loss(torch.from_numpy(x), torch.from_numpy(y))
            out.append((s, float(loss)))
    return out


def compare(loom_records, torch_losses, rtol, stream=None):
    """Prints step / loom / torch / rel.diff; returns True when all agree."""
    stream = stream or sys.stdout
    ours = dict(torch_losses)
    ok = True
    print(f"{'step':>6}  {'loom':>14}  {'torch':>14}  {'rel.diff':>10}",
          file=stream)
    for s in sorted(set(ours) | set(loom_records)):
        if s not in loom_records or s not in ours:
            side = "loom log" if s not in loom_records else "reference"
            print(f"{s:>6}  missing from the {side}", file=stream)
            ok = False
            continue
        a = float(loom_records[s]["loss"])
        b = ours[s]
        rel = abs(a - b) / max(abs(b), 1e-30)
        bad = not rel <= rtol  # NaN counts as bad
        ok &= not bad
        print(f"{s:>6}  {a:>14.8f}  {b:>14.8f}  {rel:>10.2e}"
              + ("  > rtol" if bad else ""), file=stream)
    return ok


def parse_args(argv):
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
    ap.add_argument("--config", required=True, help="HF GPT-2 config.json")
    ap.add_argument("--checkpoint", help="safetensors weights (HF names)")
    ap.add_argument("--data", help="llm.c/nanoGPT token file")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--steps", type=int,
                    help="steps 0..N-1 (default 1; with --compare, the "
                         "steps of the log)")
    ap.add_argument("--out", help="write the JSON lines here, not stdout")
    ap.add_argument("--double", action="store_true", help="compute in float64")
    ap.add_argument("--threads", type=int, help="torch.set_num_threads")
    ap.add_argument("--compare", metavar="LOG.jsonl",
                    help="compare with a Loom JSON log; exit 1 on mismatch")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--init-check", action="store_true",
                    help="print the loss expected at GPT-2 init, ln(vocab), "
                         "and with --data the loss of a seeded init model")
    ap.add_argument("--seed", type=int, default=0,
                    help="init seed for --init-check")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.seq < 1:
        ap.error("--batch and --seq must be positive")
    if args.steps is not None and args.steps < 1:
        ap.error("--steps must be positive")
    if not args.init_check and not (args.checkpoint and args.data):
        ap.error("--checkpoint and --data are required (or --init-check)")
    return args


def run(args):
    """The CLI's work; raises FormatError on bad input. Returns exit code."""
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.double else torch.float32
    cfg = GPT2Config.from_json(args.config)

    if args.init_check:
        print(json.dumps({"expected_init_loss": math.log(cfg.vocab_size),
                          "vocab_size": cfg.vocab_size}))
        if args.data:
            tokens = loomfmt.read_token_file(args.data)
            model = GPT2(cfg, init_weights(cfg, args.seed, dtype))
            (_, loss), = step_losses(model, tokens, args.batch, args.seq, [0])
            print(json.dumps({"init_seed": args.seed, "step": 0,
                              "loss": loss}))
        return 0

    loom_records = None
    if args.compare:
        loom_records = loomfmt.read_step_log(args.compare)
        if not loom_records:
            raise FormatError(f"{args.compare}: no lines with \"step\" and "
                              "\"loss\"")
    if args.steps is not None:
        steps = range(args.steps)
    elif loom_records is not None:
        steps = sorted(loom_records)
        if steps[0] < 0:
            raise FormatError(f"{args.compare}: negative step {steps[0]}")
    else:
        steps = range(1)

    tokens = loomfmt.read_token_file(args.data)
    model = GPT2(cfg, load_weights(cfg, args.checkpoint, dtype))
    losses = step_losses(model, tokens, args.batch, args.seq, steps)

    if loom_records is not None:
        if args.out:
            with open(args.out, "w", encoding="utf-8") as f:
                for s, loss in losses:
                    f.write(json.dumps({"step": s, "loss": loss}) + "\n")
        ok = compare(loom_records, losses, args.rtol)
        print(f"{'PASS' if ok else 'FAIL'}: {len(losses)} reference step(s), "
              f"{len(loom_records)} loom step(s), rtol {args.rtol:g}")
        return 0 if ok else 1

    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    try:
        for s, loss in losses:
            out.write(json.dumps({"step": s, "loss": loss}) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def main(argv=None):
    args = parse_args(argv)
    try:
        return run(args)
    except FormatError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
