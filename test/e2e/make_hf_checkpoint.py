#!/usr/bin/python3
"""Writes a Loom checkpoint's weights the ways HF transformers saves GPT-2.

    make_hf_checkpoint.py LOOM.safetensors --lm-model OUT.safetensors
        [--weights-only W.safetensors] [--untied U.safetensors]
        [--missing M.safetensors]

--lm-model: GPT2LMHeadModel.save_pretrained's layout: every weight under
"transformer.<name>", the LM head "lm_head.weight" (a copy of wte, which GPT-2
ties), and the attention buffers older files carry ("transformer.h.N.attn.bias",
the causal mask [1, 1, P, P], and "transformer.h.N.attn.masked_bias"), with
metadata {"format": "pt"} and no optimizer state or step. --weights-only: the
same weights under Loom's names without the optimizer state (what a weights-
only fine-tuning start holds). --untied: like --lm-model, but lm_head.weight is
wte + 1e-3 (a model whose head was trained apart from the embedding).
--missing: like --lm-model without transformer.ln_f.bias.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loomfmt  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("--lm-model", required=True)
    ap.add_argument("--weights-only")
    ap.add_argument("--untied")
    ap.add_argument("--missing")
    args = ap.parse_args()
    tensors, _ = loomfmt.read_safetensors(args.checkpoint)
    weights = {k: v for k, v in tensors.items()
               if not k.startswith("optimizer.")}
    positions = weights["wpe.weight"].shape[0]
    layers = sorted({int(k.split(".")[1]) for k in weights
                     if k.startswith("h.")})
    hf = {"transformer." + k: v for k, v in weights.items()}
    hf["lm_head.weight"] = weights["wte.weight"].copy()
    mask = np.tril(np.ones((positions, positions), dtype=np.float32))
    for n in layers:
        hf[f"transformer.h.{n}.attn.bias"] = mask.reshape(
            1, 1, positions, positions)
        hf[f"transformer.h.{n}.attn.masked_bias"] = np.array(
            -1e4, dtype=np.float32)
    loomfmt.write_safetensors(args.lm_model, hf, {"format": "pt"})
    if args.weights_only:
        loomfmt.write_safetensors(args.weights_only, weights,
                                  {"format": "pt"})
    if args.untied:
        untied = dict(hf)
        untied["lm_head.weight"] = weights["wte.weight"] + np.float32(1e-3)
        loomfmt.write_safetensors(args.untied, untied, {"format": "pt"})
    if args.missing:
        missing = {k: v for k, v in hf.items()
                   if k != "transformer.ln_f.bias"}
        loomfmt.write_safetensors(args.missing, missing, {"format": "pt"})
    print(f"{args.lm_model}: {len(hf)} tensors ({len(weights)} weights as "
          f"transformer.*, lm_head.weight, {2 * len(layers)} attention "
          "buffers)")


if __name__ == "__main__":
    main()
