#!/usr/bin/python3
"""Checks Loom's GPT-2 BPE (loom-run --tokenizer, scripts/tokenize) against a
reference written from tiktoken's definition.

The reference pre-tokenizes with GPT-2's pattern as tiktoken writes it,
compiled by the `regex` module (Debian's python3-regex, which knows \\p{L}
and \\p{N}; Python's re does not), and merges bytes as tiktoken's
_byte_pair_merge: a piece that is a token is that token, else repeatedly
join the adjacent pair whose concatenation has the lowest rank (= id),
leftmost on ties. Neither Loom implementation shares code with it.

  bpe_reference.py files TOK.bin --text T.txt... --tokens A.bin...
      [--eot-per-text]
    scripts/tokenize's token files (concatenated) == the reference encoding
    of the texts (each preceded by end-of-text with --eot-per-text).
  bpe_reference.py prompts TOK.bin --loom-run BIN --program EVAL.loom
      [--random N]
    for hand-picked and N random (seeded) prompts mixing letters, digits,
    marks, punctuation, apostrophes and Unicode white space: loom-run's
    prompt ids (--sample 0 --log-json) == scripts/gpt2_bpe.py's == the
    reference's; and the ids decode back to the prompt.
  bpe_reference.py decode TOK.bin --loom-run BIN --program EVAL.loom
      [--random N]
    N random id sequences (mostly single bytes, so characters are cut):
    loom-run's text == bytes.decode("utf-8", errors="replace") of the ids'
    bytes (what tiktoken's decode returns).
  bpe_reference.py sampled TOK.bin --log S.json --stdout OUT.txt
      [--implicit-start]
    a loom sample run's printed text == the reference decode of its ids
    (with --implicit-start: of the sampled ids only).

Prints what was compared; FAIL and exit 1 on the first mismatch.
"""
import argparse
import json
import os
import random
import struct
import subprocess
import sys
import tempfile

import regex

GPT2_PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(HERE, "..", "..", "scripts")


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def read_table(path):
    """(tokens, eot) of an llm.c tokenizer file (version 2)."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, vocab, eot = struct.unpack_from("<4i", data, 0)
    assert magic == 20240328 and version == 2, (magic, version)
    tokens, at = [], 1024
    for _ in range(vocab):
        n = data[at]
        tokens.append(data[at + 1:at + 1 + n])
        at += 1 + n
    assert at == len(data)
    return tokens, eot


class Reference:
    def __init__(self, path):
        self.tokens, self.eot = read_table(path)
        self.ranks = {t: i for i, t in enumerate(self.tokens) if i != self.eot}

    def merge(self, piece):
        if piece in self.ranks:
            return [self.ranks[piece]]
        parts = [bytes([b]) for b in piece]
        while True:
            scored = [(self.ranks[parts[i] + parts[i + 1]], i)
                      for i in range(len(parts) - 1)
                      if parts[i] + parts[i + 1] in self.ranks]
            if not scored:
                return [self.ranks[p] for p in parts]
            _, i = min(scored)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]

    def pieces(self, text):
        return GPT2_PATTERN.findall(text)

    def encode(self, text):
        out = []
        for piece in self.pieces(text):
            out += self.merge(piece.encode("utf-8"))
        return out

    def decode(self, ids):
        return b"".join(self.tokens[i] for i in ids).decode(
            "utf-8", errors="replace")


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    count = struct.unpack_from("<3i", data, 0)[2]
    return list(struct.unpack_from(f"<{count}H", data, 1024))


# Hand-picked prompts: each alternative of the pattern and its edges.
PROMPTS = [
    "Hello world", "It's", "we'll they're I'm you've he'd don't",
    "'S 'T 'RE (capital: no contraction)", "''s", "rock'n'roll",
    "a  b", "a   b", "trailing   ", "   leading", "\n\nThe", "line\n",
    "tab\there", " \t \n x", "x\r\ny", "price: $12,345.67!", "3.14159",
    "1st 2nd 42nd", "!!!???...", " !", "(a)[b]{c}", "caf\u00e9 na\u00efve",
    "e\u0301 (combining mark)", "\u00dcber \u00e4\u00f6\u00fc", "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8",
    "\u0661\u0662\u0663 \u00b2\u00b3 \u2167", "\U0001F44D\U0001F3FD \U0001F389",
    "no\u00a0break", "ideographic\u3000space", "line\u2028sep", "ogham\u1680x",
    "\u2003em space", "x\u0085y", "\u0410\u0411\u0412 \u03b1\u03b2\u03b3",
    "a\u200bb (zero width space is not white space)", "end.",
]
ALPHABET = (list("abcXYZ019 '\n\t.,!-_") + ["  ", "'s", "'ll", "\u00e9",
            "\u00a0", "\u3000", "\u0301", "\u4e2d", "\u0663", "\u00bd",
            "\U0001F600", "\u2028", "\u00df"])


def random_prompts(n, seed=2024):
    rng = random.Random(seed)
    return ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, 24)))
            for _ in range(n)]


def run_loom(args, flags):
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "sample.json")
        cmd = [args.loom_run, args.program, "--sample", "0", "--quiet",
               "--tokenizer", args.tokenizer, "--log-json", log] + flags
        run = subprocess.run(cmd, capture_output=True)
        if run.returncode != 0:
            fail(f"{cmd} exited {run.returncode}: {run.stderr.decode()}")
        with open(log, encoding="utf-8") as f:
            return json.load(f), run.stdout.decode("utf-8")


def check_files(args):
    ref = Reference(args.tokenizer)
    expected = []
    for path in args.text:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        expected += ([ref.eot] if args.eot_per_text else []) + ref.encode(text)
    got = []
    for path in args.tokens:
        got += read_tokens(path)
    if got != expected:
        at = next(i for i in range(min(len(got), len(expected)) + 1)
                  if i >= len(got) or i >= len(expected) or
                  got[i] != expected[i])
        fail(f"token files differ from the reference at token {at} "
             f"({len(got)} vs {len(expected)} tokens)")
    chars = sum(os.path.getsize(p) for p in args.text)
    print(f"files: {len(got)} tokens == reference "
          f"({chars / len(got):.2f} bytes per token)")


def check_prompts(args):
    sys.path.insert(0, SCRIPTS)
    import gpt2_bpe
    ref = Reference(args.tokenizer)
    mine = gpt2_bpe.read_tokenizer(args.tokenizer)
    prompts = PROMPTS + random_prompts(args.random)
    total = 0
    for p in prompts:
        if gpt2_bpe.split_pieces(p) != ref.pieces(p):
            fail(f"scripts/gpt2_bpe.py splits {p!r} as "
                 f"{gpt2_bpe.split_pieces(p)}, the pattern as "
                 f"{ref.pieces(p)}")
        expected = ref.encode(p)
        if mine.encode(p) != expected:
            fail(f"scripts/gpt2_bpe.py encodes {p!r} as {mine.encode(p)}, "
                 f"the reference as {expected}")
        record, _ = run_loom(args, ["--prompt", p])
        if record["prompt_tokens"] != expected:
            fail(f"loom-run encodes {p!r} as {record['prompt_tokens']}, the "
                 f"reference as {expected}")
        if ref.decode(expected) != p or record["text"] != p:
            fail(f"{p!r} decodes back as {record['text']!r}")
        total += len(expected)
    print(f"prompts: {len(prompts)} ({total} tokens): loom-run == "
          "scripts/gpt2_bpe.py == reference, and they decode back")


def check_decode(args):
    ref = Reference(args.tokenizer)
    rng = random.Random(7)
    vocab = len(ref.tokens)
    replaced = 0
    for _ in range(args.random):
        ids = [rng.randrange(256) if rng.random() < 0.8 else
               rng.randrange(256, vocab) for _ in range(rng.randint(1, 12))]
        expected = ref.decode(ids)
        record, stdout = run_loom(
            args, ["--prompt-tokens", ",".join(map(str, ids))])
        if record["text"] != expected or stdout != expected + "\n":
            fail(f"ids {ids} decode as {record['text']!r} "
                 f"(stdout {stdout!r}), the reference as {expected!r}")
        replaced += expected.count("\ufffd")
    print(f"decode: {args.random} random id sequences == "
          f"bytes.decode(errors='replace') ({replaced} U+FFFD)")


def check_sampled(args):
    ref = Reference(args.tokenizer)
    with open(args.log, encoding="utf-8") as f:
        record = json.load(f)
    with open(args.stdout, encoding="utf-8") as f:
        printed = f.read()
    ids = record["tokens"] if args.implicit_start else (
        record["prompt_tokens"] + record["tokens"])
    expected = ref.decode(ids)
    if printed != expected + "\n" or record["text"] != expected:
        fail(f"printed {printed!r}, the reference decodes {expected!r}")
    top = max(record["tokens"], default=-1)
    print(f"sampled: {len(record['tokens'])} tokens (max id {top}) decode "
          "as printed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["files", "prompts", "decode", "sampled"])
    ap.add_argument("tokenizer")
    ap.add_argument("--text", nargs="+", default=[])
    ap.add_argument("--tokens", nargs="+", default=[])
    ap.add_argument("--eot-per-text", action="store_true")
    ap.add_argument("--loom-run")
    ap.add_argument("--program")
    ap.add_argument("--random", type=int, default=50)
    ap.add_argument("--log")
    ap.add_argument("--stdout")
    ap.add_argument("--implicit-start", action="store_true")
    args = ap.parse_args()
    {"files": check_files, "prompts": check_prompts, "decode": check_decode,
     "sampled": check_sampled}[args.mode](args)


if __name__ == "__main__":
    main()
