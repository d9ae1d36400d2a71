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

--train trains from the checkpoint's weights with the semantics of
`loom train` and prints {"step", "loss", "lr", "grad_norm"} per step:
  ... --train --steps N [--microbatches M] [--lr 1e-3] [--min-lr 0]
      [--warmup 0] [--lr-schedule cosine|constant] [--schedule-steps S]
      [--wd 0.01] [--clip 1.0] [--beta1 0.9] [--beta2 0.999] [--eps 1e-8]
      [--resume] [--save-checkpoint F] [--compare LOG.jsonl --rtol 1e-4]
* step s uses global batch s; the B rows are split into M micro-batches of
  B/M consecutive rows, each loss a mean over its tokens, backpropagated
  scaled by 1/M; the logged loss is the mean of the micro-batch losses,
  from the forward before the update.
* grad_norm = sqrt(sum g^2) over all parameters (tied wte once), logged
  before clipping; clip_grad_norm_(params, clip) when clip > 0.
* torch.optim.AdamW, two groups: weight decay wd for every parameter of
  >= 2 dims (matmul weights, wte, wpe), 0 for biases and layer norms.
* lr_s = lr*(s+1)/W for s < W (warmup), else lr (constant) or
  min_lr + 0.5*(1+cos(pi*p))*(lr-min_lr), p = clamp((s-W)/max(1, S-W)),
  S = --schedule-steps (default --steps).
* --steps N is the run's total: steps 0..N-1, or k..N-1 with --resume,
  which also loads optimizer.exp_avg.<name> / optimizer.exp_avg_sq.<name>
  and metadata "step" = k (updates done) from the checkpoint.
* --save-checkpoint writes the final weights (HF names, float32) plus the
  optimizer moments and metadata step, as Loom does.
--compare checks loss (rtol), lr (1e-6 relative) and grad_norm (10*rtol).
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


class GPT2Builtin(GPT2):
    """The same model from torch's fused built-ins (F.layer_norm, F.gelu,
    softmax, F.cross_entropy): faster, for benchmarks (bench/train_cpu
    --torch-model builtin). The tests check it against GPT2."""

    def hidden(self, idx):
        F = torch.nn.functional
        cfg, w = self.cfg, self.w
        B, T = idx.shape
        C, nh = cfg.n_embd, cfg.n_head
        eps = cfg.layer_norm_epsilon
        future = torch.ones(T, T, dtype=torch.bool).triu(diagonal=1)
        x = F.embedding(idx, w["wte.weight"]) + w["wpe.weight"][:T]
        for i in range(cfg.n_layer):
            h = f"h.{i}."
            a = F.layer_norm(x, (C,), w[h + "ln_1.weight"], w[h + "ln_1.bias"],
                             eps)
            qkv = torch.addmm(w[h + "attn.c_attn.bias"], a.view(B * T, C),
                              w[h + "attn.c_attn.weight"])
            q, k, v = qkv.view(B, T, 3, nh, C // nh).permute(2, 0, 3, 1, 4)
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // nh))
            att = att.masked_fill(future, float("-inf")).softmax(dim=-1)
            y = (att @ v).transpose(1, 2).reshape(B * T, C)
            x = x + torch.addmm(w[h + "attn.c_proj.bias"], y,
                                w[h + "attn.c_proj.weight"]).view(B, T, C)
            m = F.layer_norm(x, (C,), w[h + "ln_2.weight"], w[h + "ln_2.bias"],
                             eps).view(B * T, C)
            m = F.gelu(torch.addmm(w[h + "mlp.c_fc.bias"], m,
                                   w[h + "mlp.c_fc.weight"]),
                       approximate="tanh")
            x = x + torch.addmm(w[h + "mlp.c_proj.bias"], m,
                                w[h + "mlp.c_proj.weight"]).view(B, T, C)
        return F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps)

    def loss(self, idx, targets):
        logits = self.logits(idx)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


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


#===----------------------------------------------------------------------===#
# Training
#===----------------------------------------------------------------------===#

OPT_EXP_AVG = "optimizer.exp_avg."
OPT_EXP_AVG_SQ = "optimizer.exp_avg_sq."


class TrainConfig:
    """The hyper-parameters of a training run (defaults as `loom train`)."""

    def __init__(self, batch=4, seq=64, steps=1, microbatches=1, lr=1e-3,
                 min_lr=0.0, warmup=0, lr_schedule="cosine",
                 schedule_steps=None, wd=0.01, clip=1.0, beta1=0.9,
                 beta2=0.999, eps=1e-8):
        self.batch, self.seq, self.steps = batch, seq, steps
        self.microbatches = microbatches
        self.lr, self.min_lr, self.warmup = lr, min_lr, warmup
        self.lr_schedule = lr_schedule
        self.schedule_steps = steps if schedule_steps is None \
            else schedule_steps
        self.wd, self.clip = wd, clip
        self.beta1, self.beta2, self.eps = beta1, beta2, eps
        if batch < 1 or seq < 1 or steps < 1 or microbatches < 1:
            raise FormatError("batch, seq, steps and microbatches must be "
                              "positive")
        if batch % microbatches:
            raise FormatError(f"batch {batch} is not divisible by "
                              f"microbatches {microbatches}")
        if warmup < 0 or self.schedule_steps < 0:
            raise FormatError("warmup and schedule steps must be >= 0")
        if lr_schedule not in ("constant", "cosine"):
            raise FormatError(f"unknown lr schedule {lr_schedule!r}")

    def lr_at(self, step):
        return lr_at(step, self.lr, self.min_lr, self.warmup,
                     self.lr_schedule, self.schedule_steps)


def lr_at(step, lr, min_lr=0.0, warmup=0, schedule="cosine",
          schedule_steps=1):
    """Learning rate of 0-based step `step` (see the module docstring)."""
    if step < warmup:
        return lr * (step + 1) / warmup
    if schedule == "constant":
        return lr
    p = (step - warmup) / max(1, schedule_steps - warmup)
    p = min(max(p, 0.0), 1.0)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * p)) * (lr - min_lr)


def decays(name, value):
    """nanoGPT's rule: weight decay for every parameter of >= 2 dims."""
    return value.dim() >= 2


class Trainer:
    """GPT-2 training with torch.optim.AdamW, as `loom train` does it.

    `weights` is {HF name: tensor}; the trainer keeps its own leaf copies
    (requires_grad) in self.params, which the GPT2 model reads directly.
    """

    def __init__(self, cfg, weights, tc, model_cls=GPT2):
        self.cfg, self.tc = cfg, tc
        self.params = {k: v.detach().clone().requires_grad_(True)
                       for k, v in weights.items()}
        self.model = model_cls(cfg, self.params)
        decay = [p for k, p in self.params.items() if decays(k, p)]
        no_decay = [p for k, p in self.params.items() if not decays(k, p)]
        self.optimizer = torch.optim.AdamW(
            [{"params": decay, "weight_decay": tc.wd},
             {"params": no_decay, "weight_decay": 0.0}],
            lr=tc.lr, betas=(tc.beta1, tc.beta2), eps=tc.eps)
        self.updates = 0  # optimizer steps taken (the checkpoint's "step")

    def load_optimizer_state(self, tensors, step, where="checkpoint"):
        """Loads Loom's optimizer.exp_avg/exp_avg_sq.<name> moments and the
        number of updates already taken into the torch optimizer."""
        missing = [k for k in self.params
                   if OPT_EXP_AVG + k not in tensors
                   or OPT_EXP_AVG_SQ + k not in tensors]
        if missing:
            raise FormatError(f"{where}: --resume needs optimizer moments; "
                              f"{len(missing)} parameter(s) lack them, e.g. "
                              f"{OPT_EXP_AVG}{missing[0]}")
        if step < 0:
            raise FormatError(f"{where}: negative step {step}")
        for name, p in self.params.items():
            state = self.optimizer.state[p]
            state["step"] = torch.tensor(float(step))
            for prefix, key in ((OPT_EXP_AVG, "exp_avg"),
                                (OPT_EXP_AVG_SQ, "exp_avg_sq")):
                value = tensors[prefix + name]
                if list(value.shape) != list(p.shape):
                    raise FormatError(f"{where}: {prefix}{name} has shape "
                                      f"{list(value.shape)}, the parameter "
                                      f"{list(p.shape)}")
                state[key] = torch.from_numpy(np.array(value)).to(p.dtype)
        self.updates = step

    def step(self, tokens, s):
        """Trains on global batch s; returns {"step","loss","lr","grad_norm"}."""
        tc = self.tc
        lr = tc.lr_at(s)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        self.optimizer.zero_grad(set_to_none=True)
        x, y = (torch.from_numpy(a)
                for a in loomfmt.get_batch(tokens, tc.batch, tc.seq, s))
        rows = tc.batch // tc.microbatches
        total = 0.0
        for m in range(tc.microbatches):
            part = slice(m * rows, (m + 1) * rows)
            loss = self.model.loss(x[part], y[part])
            (loss / tc.microbatches).backward()
            total += float(loss)
        params = list(self.params.values())
        if tc.clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, tc.clip)
        else:
            norm = torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(p.grad) for p in params]))
        self.optimizer.step()
        self.updates += 1
        return {"step": s, "loss": total / tc.microbatches, "lr": lr,
                "grad_norm": float(norm)}

    def checkpoint_tensors(self):
        """{name: float32 array}: weights and optimizer moments, HF names."""
        out = {}
        for name, p in self.params.items():
            out[name] = p.detach().float().numpy()
            state = self.optimizer.state.get(p, {})
            if "exp_avg" in state:
                out[OPT_EXP_AVG + name] = state["exp_avg"].float().numpy()
                out[OPT_EXP_AVG_SQ + name] = \
                    state["exp_avg_sq"].float().numpy()
        return out

    def save(self, path):
        loomfmt.write_safetensors(path, self.checkpoint_tensors(),
                                  metadata={"format": "pt",
                                            "step": self.updates})


def train_records(cfg, weights, tokens, tc, start_step=0, trainer=None):
    """Yields the step records of steps start_step..tc.steps-1."""
    trainer = trainer or Trainer(cfg, weights, tc)
    for s in range(start_step, tc.steps):
        yield trainer.step(tokens, s)


def compare_train(loom_records, ours, rtol, stream=None):
    """Per step: loss (rtol), lr (1e-6 rel) and grad_norm (10*rtol).
    Prints a table; returns True when everything agrees."""
    stream = stream or sys.stdout
    ours = {r["step"]: r for r in ours}
    lr_rtol, norm_rtol = 1e-6, 10 * rtol
    ok = True

    def rel(a, b):
        return abs(a - b) / max(abs(a), abs(b), 1e-30)

    print(f"{'step':>5}  {'loom loss':>12}  {'torch loss':>12}  "
          f"{'rel':>8}  {'lr rel':>8}  {'loom gnorm':>11}  "
          f"{'torch gnorm':>11}  {'rel':>8}", file=stream)
    for s in sorted(set(ours) | set(loom_records)):
        if s not in loom_records or s not in ours:
            side = "loom log" if s not in loom_records else "reference"
            print(f"{s:>5}  missing from the {side}", file=stream)
            ok = False
            continue
        mine, theirs = ours[s], loom_records[s]
        absent = [k for k in ("lr", "grad_norm")
                  if not isinstance(theirs.get(k), (int, float))]
        if absent:
            print(f"{s:>5}  loom log lacks {', '.join(absent)}", file=stream)
            ok = False
            continue
        loss_rel = rel(float(theirs["loss"]), mine["loss"])
        lr_rel = 0.0 if theirs["lr"] == mine["lr"] \
            else rel(float(theirs["lr"]), mine["lr"])
        norm_rel = rel(float(theirs["grad_norm"]), mine["grad_norm"])
        bad = [what for what, r, tol in (("loss", loss_rel, rtol),
                                         ("lr", lr_rel, lr_rtol),
                                         ("grad_norm", norm_rel, norm_rtol))
               if not r <= tol]  # NaN counts as bad
        ok &= not bad
        print(f"{s:>5}  {float(theirs['loss']):>12.7f}  {mine['loss']:>12.7f}  "
              f"{loss_rel:>8.1e}  {lr_rel:>8.1e}  "
              f"{float(theirs['grad_norm']):>11.6f}  {mine['grad_norm']:>11.6f}"
              f"  {norm_rel:>8.1e}"
              + (f"  > tol: {', '.join(bad)}" if bad else ""), file=stream)
    return ok


def run_train(args, cfg, dtype, loom_records):
    """--train: returns the exit code."""
    if args.steps is not None:
        steps = args.steps
    elif loom_records is not None:
        steps = max(loom_records) + 1
    else:
        steps = 1
    tc = TrainConfig(batch=args.batch, seq=args.seq, steps=steps,
                     microbatches=args.microbatches, lr=args.lr,
                     min_lr=args.min_lr, warmup=args.warmup,
                     lr_schedule=args.lr_schedule,
                     schedule_steps=args.schedule_steps, wd=args.wd,
                     clip=args.clip, beta1=args.beta1, beta2=args.beta2,
                     eps=args.eps)
    tokens = loomfmt.read_token_file(args.data)
    tensors, metadata = loomfmt.read_safetensors(args.checkpoint)
    weights = {k: torch.from_numpy(np.array(v)).to(dtype) for k, v in
               select_weights(cfg, tensors, where=args.checkpoint).items()}
    trainer = Trainer(cfg, weights, tc)
    start = 0
    if args.resume:
        try:
            start = int(metadata.get("step", ""))
        except ValueError:
            raise FormatError(f"{args.checkpoint}: --resume needs an integer "
                              f"metadata \"step\", got "
                              f"{metadata.get('step')!r}")
        trainer.load_optimizer_state(tensors, start, where=args.checkpoint)
        if start >= steps:
            raise FormatError(f"{args.checkpoint} is at step {start}; "
                              f"--steps {steps} leaves nothing to train")
    del tensors

    out = None
    if args.out:
        out = open(args.out, "w", encoding="utf-8")
    elif loom_records is None:
        out = sys.stdout
    records = []
    try:
        for record in train_records(cfg, None, tokens, tc, start, trainer):
            records.append(record)
            if out is not None:
                out.write(json.dumps(record) + "\n")
                out.flush()
    finally:
        if out is not None and out is not sys.stdout:
            out.close()
    if args.save_checkpoint:
        trainer.save(args.save_checkpoint)
    if loom_records is None:
        return 0
    if start:
        earlier = [k for k in loom_records if k < start]
        if earlier:
            print(f"note: resumed at step {start}; ignoring {len(earlier)} "
                  f"earlier step(s) of {args.compare}")
            loom_records = {k: v for k, v in loom_records.items()
                            if k >= start}
    ok = compare_train(loom_records, records, args.rtol)
    print(f"{'PASS' if ok else 'FAIL'}: {len(records)} reference step(s), "
          f"{len(loom_records)} loom step(s); loss rtol {args.rtol:g}, "
          f"lr rtol 1e-06, grad_norm rtol {10 * args.rtol:g}")
    return 0 if ok else 1


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
    tr = ap.add_argument_group("training (--train)")
    tr.add_argument("--train", action="store_true",
                    help="train from --checkpoint as `loom train` does")
    tr.add_argument("--microbatches", type=int, default=1)
    tr.add_argument("--lr", type=float, default=1e-3)
    tr.add_argument("--min-lr", type=float, default=0.0)
    tr.add_argument("--warmup", type=int, default=0)
    tr.add_argument("--lr-schedule", choices=("constant", "cosine"),
                    default="cosine")
    tr.add_argument("--schedule-steps", type=int,
                    help="S of the cosine schedule (default --steps)")
    tr.add_argument("--wd", type=float, default=0.01)
    tr.add_argument("--clip", type=float, default=1.0,
                    help="global-norm clip; <= 0 disables")
    tr.add_argument("--beta1", type=float, default=0.9)
    tr.add_argument("--beta2", type=float, default=0.999)
    tr.add_argument("--eps", type=float, default=1e-8)
    tr.add_argument("--resume", action="store_true",
                    help="load the optimizer moments and step from "
                         "--checkpoint")
    tr.add_argument("--save-checkpoint", metavar="F",
                    help="write the final weights and optimizer state")
    args = ap.parse_args(argv)
    if args.batch < 1 or args.seq < 1:
        ap.error("--batch and --seq must be positive")
    if args.steps is not None and args.steps < 1:
        ap.error("--steps must be positive")
    if not args.init_check and not (args.checkpoint and args.data):
        ap.error("--checkpoint and --data are required (or --init-check)")
    if args.train:
        if args.init_check:
            ap.error("--train and --init-check do not mix")
        if args.microbatches < 1 or args.warmup < 0:
            ap.error("--microbatches must be positive, --warmup >= 0")
        if args.batch % args.microbatches:
            ap.error(f"--batch {args.batch} is not divisible by "
                     f"--microbatches {args.microbatches}")
    elif args.resume or args.save_checkpoint:
        ap.error("--resume and --save-checkpoint need --train")
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
    if args.train:
        return run_train(args, cfg, dtype, loom_records)
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
