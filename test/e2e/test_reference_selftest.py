#!/usr/bin/python3
"""Self-test of the e2e helpers: loomfmt, gpt2_reference and scripts/tokenize.

Builds a random tiny GPT-2 in torch, writes it as safetensors with loomfmt,
writes a token file, and checks that gpt2_reference's loss equals
F.cross_entropy over a forward written here independently (torch built-ins:
F.layer_norm, F.gelu(approximate="tanh"), F.linear, a per-head loop with an
explicit masked softmax). Also checks the batch layout, the CLI (JSON lines,
--compare pass/fail), and that corrupt checkpoints, token files and logs give
a clear error rather than a traceback.

The --train mode is checked against a training loop written here from the
definitions (F.cross_entropy, autograd.grad per micro-batch, name-based
weight-decay groups, a hand-written AdamW and global-norm clip), plus
micro-batching == full batch, clipping on/off, schedule values, resume,
the --compare checks, and test/e2e/compare_weights.py.

Run: /usr/bin/python3 test/e2e/test_reference_selftest.py
Prints "N passed, N failed" and exits 1 when anything failed. ~10 s.
"""
import contextlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import traceback

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import gpt2_reference as ref  # noqa: E402
import loomfmt  # noqa: E402
from loomfmt import FormatError  # noqa: E402

REFERENCE = os.path.join(HERE, "gpt2_reference.py")
TOKENIZE = os.path.join(ROOT, "scripts", "tokenize")
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") \
    else sys.executable

CFG = ref.GPT2Config(n_layer=2, n_head=4, n_embd=32, vocab_size=256,
                     n_positions=32, layer_norm_epsilon=1e-5)
B, T = 3, 16


#===----------------------------------------------------------------------===#
# Fixtures
#===----------------------------------------------------------------------===#

def random_weights(cfg, seed=1):
    """Random weights with non-trivial LN gains/biases so every term counts."""
    gen = torch.Generator().manual_seed(seed)
    weights = {}
    for name, shape in ref.weight_shapes(cfg).items():
        if ".ln_" in name or name.startswith("ln_f"):
            base = 1.0 if name.endswith("weight") else 0.0
            value = base + 0.1 * torch.randn(shape, generator=gen)
        else:
            value = 0.1 * torch.randn(shape, generator=gen)
        weights[name] = value.float()
    return weights


def independent_forward(cfg, w, idx, head=None):
    """Logits [B, T, V] from torch built-ins, one head at a time; `head`
    replaces wte in the LM head (default: tied)."""
    Bn, Tn = idx.shape
    C, nh = cfg.n_embd, cfg.n_head
    hs = C // nh
    eps = cfg.layer_norm_epsilon
    x = F.embedding(idx, w["wte.weight"]) + F.embedding(
        torch.arange(Tn), w["wpe.weight"])
    allowed = torch.tril(torch.ones(Tn, Tn)).bool()
    for i in range(cfg.n_layer):
        p = f"h.{i}."
        a = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], eps)
        qkv = F.linear(a, w[p + "attn.c_attn.weight"].t(), w[p + "attn.c_attn.bias"])
        heads = []
        for h in range(nh):
            q = qkv[..., h * hs:(h + 1) * hs]
            k = qkv[..., C + h * hs:C + (h + 1) * hs]
            v = qkv[..., 2 * C + h * hs:2 * C + (h + 1) * hs]
            att = torch.bmm(q, k.transpose(1, 2)) / math.sqrt(hs)
            att = torch.where(allowed, att, torch.full_like(att, -1e30))
            heads.append(torch.bmm(F.softmax(att, dim=-1), v))
        y = torch.cat(heads, dim=-1)
        x = x + F.linear(y, w[p + "attn.c_proj.weight"].t(), w[p + "attn.c_proj.bias"])
        m = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], eps)
        m = F.gelu(F.linear(m, w[p + "mlp.c_fc.weight"].t(), w[p + "mlp.c_fc.bias"]),
                   approximate="tanh")
        x = x + F.linear(m, w[p + "mlp.c_proj.weight"].t(), w[p + "mlp.c_proj.bias"])
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], eps)
    return F.linear(x, w["wte.weight"] if head is None else head)


def independent_loss(cfg, w, idx, targets):
    logits = independent_forward(cfg, w, idx)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                           targets.reshape(-1))


class Workdir:
    """A temp dir with config.json, model.safetensors and tokens.bin."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="loom-e2e-selftest-")
        self.dir = self.tmp.name
        self.config = self.path("config.json")
        with open(self.config, "w") as f:
            json.dump(CFG.to_dict(), f)
        self.weights = random_weights(CFG)
        self.checkpoint = self.path("model.safetensors")
        extra = {"optimizer.m.wte.weight": np.zeros((3, 2), np.float32),
                 "h.0.attn.bias": np.ones((1, 1, 4, 4), np.float32)}
        loomfmt.write_safetensors(
            self.checkpoint, {**{k: v.numpy() for k, v in self.weights.items()},
                              **extra}, metadata={"format": "pt"})
        rng = np.random.default_rng(7)
        self.tokens = rng.integers(0, 256, size=5 * B * T + 7)
        self.data = self.path("tokens.bin")
        loomfmt.write_token_file(self.data, self.tokens)

    def path(self, name):
        return os.path.join(self.dir, name)


def run_cli(args, expect_rc):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != expect_rc:
        raise AssertionError(f"{' '.join(args)} exited {proc.returncode}, "
                             f"expected {expect_rc}\nstdout: {proc.stdout}\n"
                             f"stderr: {proc.stderr}")
    if "Traceback" in proc.stderr:
        raise AssertionError(f"traceback from {' '.join(args)}:\n{proc.stderr}")
    return proc


def run_reference(args, expect_rc):
    """gpt2_reference's CLI in this process (no torch re-import per call);
    returns an object with stdout and stderr like run_cli."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = ref.main(args)
        except SystemExit as e:  # argparse errors
            rc = e.code
    result = subprocess.CompletedProcess(args, rc, out.getvalue(),
                                         err.getvalue())
    if rc != expect_rc:
        raise AssertionError(f"gpt2_reference {' '.join(args)} returned {rc}, "
                             f"expected {expect_rc}\nstdout: {result.stdout}\n"
                             f"stderr: {result.stderr}")
    return result


def expect_format_error(fn, *words):
    try:
        fn()
    except FormatError as e:
        message = str(e)
        for word in words:
            assert word in message, f"{word!r} not in error: {message}"
        return message
    raise AssertionError(f"no FormatError (expected one mentioning {words})")


#===----------------------------------------------------------------------===#
# Tests
#===----------------------------------------------------------------------===#

def test_safetensors_roundtrip(wd):
    tensors, meta = loomfmt.read_safetensors(wd.checkpoint)
    assert meta == {"format": "pt"}, meta
    for name, value in wd.weights.items():
        assert tensors[name].dtype == np.float32
        assert np.array_equal(tensors[name], value.numpy()), name
    # Header layout as the spec says: u64 length, JSON, buffer.
    with open(wd.checkpoint, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack_from("<Q", raw)
    header = json.loads(raw[8:8 + n])
    begin, end = header["wte.weight"]["data_offsets"]
    wte = np.frombuffer(raw[8 + n + begin:8 + n + end], "<f4").reshape(256, 32)
    assert np.array_equal(wte, wd.weights["wte.weight"].numpy())
    # Other dtypes.
    path = wd.path("dtypes.safetensors")
    values = {"a": np.arange(6, dtype=np.float64).reshape(2, 3),
              "b": np.arange(5, dtype=np.int32), "c": np.zeros((0, 4), np.float32),
              "d": np.float32(3.5) * np.ones((), np.float32)}
    loomfmt.write_safetensors(path, values)
    back, _ = loomfmt.read_safetensors(path)
    for k, v in values.items():
        assert back[k].dtype == v.dtype and np.array_equal(back[k], v), k


def test_token_file_roundtrip_and_batches(wd):
    tokens = loomfmt.read_token_file(wd.data)
    assert np.array_equal(tokens, wd.tokens)
    with open(wd.data, "rb") as f:
        head = struct.unpack("<256i", f.read(1024))
    assert head[:3] == (20240520, 1, len(wd.tokens)) and not any(head[3:])
    nb = (len(tokens) - 1) // (B * T)
    assert nb == 5
    for s in (0, 1, 4, 5, 13):
        x, y = loomfmt.get_batch(tokens, B, T, s)
        off = (s % nb) * B * T
        assert x.shape == (B, T) and x.dtype == np.int64
        for r in range(B):
            assert np.array_equal(x[r], tokens[off + r * T:off + r * T + T])
            assert np.array_equal(y[r], tokens[off + r * T + 1:off + r * T + T + 1])
    expect_format_error(lambda: loomfmt.get_batch(tokens[:B * T], B, T, 0),
                        "needs at least")


def test_loss_matches_independent_forward(wd):
    tokens = loomfmt.read_token_file(wd.data)
    w32 = ref.load_weights(CFG, wd.checkpoint, torch.float32)
    w64 = ref.load_weights(CFG, wd.checkpoint, torch.float64)
    ind64 = {k: v.double() for k, v in wd.weights.items()}
    for s in range(3):
        x, y = (torch.from_numpy(a) for a in loomfmt.get_batch(tokens, B, T, s))
        with torch.no_grad():
            want64 = float(independent_loss(CFG, ind64, x, y))
            want32 = float(independent_loss(CFG, wd.weights, x, y))
            got64 = float(ref.GPT2(CFG, w64).loss(x, y))
            got32 = float(ref.GPT2(CFG, w32).loss(x, y))
            # Logits too, not only their mean.
            l_ref = ref.GPT2(CFG, w64).logits(x)
            l_ind = independent_forward(CFG, ind64, x)
        assert abs(got64 - want64) <= 1e-12 * abs(want64), (s, got64, want64)
        assert abs(got32 - want32) <= 2e-6 * abs(want32), (s, got32, want32)
        assert abs(got32 - want64) <= 2e-6 * abs(want64), (s, got32, want64)
        assert torch.allclose(l_ref, l_ind, rtol=0, atol=1e-10)
    # The model really uses every piece: perturbing one weight moves the loss.
    x, y = (torch.from_numpy(a) for a in loomfmt.get_batch(tokens, B, T, 0))
    base = float(ref.GPT2(CFG, w64).loss(x, y))
    gen = torch.Generator().manual_seed(5)
    for name in ("wpe.weight", "h.1.attn.c_attn.bias", "h.0.ln_2.weight",
                 "ln_f.bias", "h.1.mlp.c_proj.weight"):
        moved = dict(w64)
        # Random, not constant: a constant shift of wpe cancels in ln_1.
        moved[name] = w64[name] + 0.05 * torch.randn(
            w64[name].shape, generator=gen, dtype=torch.float64)
        assert abs(float(ref.GPT2(CFG, moved).loss(x, y)) - base) > 1e-6, name


def test_causality(wd):
    """Changing a later token must not change earlier logits."""
    w = ref.load_weights(CFG, wd.checkpoint, torch.float64)
    model = ref.GPT2(CFG, w)
    x = torch.from_numpy(loomfmt.get_batch(
        loomfmt.read_token_file(wd.data), B, T, 0)[0])
    x2 = x.clone()
    x2[:, 10] = (x2[:, 10] + 1) % 256
    a, b = model.logits(x), model.logits(x2)
    assert torch.equal(a[:, :10], b[:, :10])
    assert not torch.allclose(a[:, 10:], b[:, 10:])


def test_init_loss_near_ln_vocab(wd):
    tokens = loomfmt.read_token_file(wd.data)
    model = ref.GPT2(CFG, ref.init_weights(CFG, seed=3))
    (_, loss), = ref.step_losses(model, tokens, B, T, [0])
    assert abs(loss - math.log(256)) < 0.1, loss


def test_weight_selection_errors(wd):
    tensors, _ = loomfmt.read_safetensors(wd.checkpoint)
    # HF's "transformer." prefix is accepted; extra tensors are ignored.
    prefixed = {"transformer." + k: v for k, v in tensors.items()}
    prefixed["lm_head.weight"] = tensors["wte.weight"]
    assert len(ref.select_weights(CFG, prefixed)) == len(ref.weight_shapes(CFG))
    missing = dict(tensors)
    del missing["h.1.mlp.c_fc.bias"]
    expect_format_error(lambda: ref.select_weights(CFG, missing, "ckpt"),
                        "missing", "h.1.mlp.c_fc.bias")
    bad = dict(tensors)
    bad["h.0.attn.c_attn.weight"] = tensors["h.0.attn.c_attn.weight"].T
    expect_format_error(lambda: ref.select_weights(CFG, bad, "ckpt"),
                        "h.0.attn.c_attn.weight", "[96, 32]", "[32, 96]")
    wide = ref.GPT2Config(2, 4, 64, 256, 32)
    expect_format_error(lambda: ref.select_weights(wide, tensors), "wte.weight")


def test_corrupt_safetensors(wd):
    with open(wd.checkpoint, "rb") as f:
        good = f.read()
    (n,) = struct.unpack_from("<Q", good)
    header = json.loads(good[8:8 + n])

    def write(name, data):
        path = wd.path(name)
        with open(path, "wb") as f:
            f.write(data)
        return path

    def with_header(h):
        text = json.dumps(h).encode()
        return struct.pack("<Q", len(text)) + text + good[8 + n:]

    cases = [
        ("short", good[:5], ["too short"]),
        ("hugeheader", struct.pack("<Q", 1 << 40) + good[8:], ["header length"]),
        ("truncated", good[:len(good) - 100], ["outside", "truncated"]),
        ("badjson", struct.pack("<Q", n) + b"x" + good[9:], ["not valid JSON"]),
        ("notobj", with_header([1, 2]), ["not a JSON object"]),
    ]
    h = json.loads(json.dumps(header))
    h["wpe.weight"]["dtype"] = "F8_E9"
    cases.append(("dtype", with_header(h), ["unsupported dtype", "wpe.weight"]))
    h = json.loads(json.dumps(header))
    h["wpe.weight"]["shape"] = [32, 31]
    cases.append(("size", with_header(h), ["wpe.weight", "needs"]))
    h = json.loads(json.dumps(header))
    h["ln_f.bias"]["data_offsets"] = h["ln_f.weight"]["data_offsets"]
    cases.append(("overlap", with_header(h), ["overlap"]))
    for name, data, words in cases:
        path = write(name + ".safetensors", data)
        expect_format_error(lambda: loomfmt.read_safetensors(path), *words)
    expect_format_error(lambda: loomfmt.read_safetensors(wd.path("nope")),
                        "cannot read")
    # Through the CLI: exit 1, one clear line, no traceback.
    proc = run_cli([PYTHON, REFERENCE, "--config", wd.config, "--checkpoint",
                    wd.path("truncated.safetensors"), "--data", wd.data,
                    "--batch", str(B), "--seq", str(T)], 1)
    assert proc.stderr.startswith("gpt2_reference: error:"), proc.stderr


def test_corrupt_token_files(wd):
    with open(wd.data, "rb") as f:
        good = bytearray(f.read())

    def write(name, data):
        path = wd.path(name)
        with open(path, "wb") as f:
            f.write(bytes(data))
        return path

    magic = bytearray(good)
    magic[0:4] = struct.pack("<i", 20240521)
    version = bytearray(good)
    version[4:8] = struct.pack("<i", 2)
    count = bytearray(good)
    count[8:12] = struct.pack("<i", len(wd.tokens) + 1)
    cases = [("short", good[:100], ["shorter than"]),
             ("magic", magic, ["bad magic", "20240521"]),
             ("version", version, ["version 2"]),
             ("count", count, ["header says"]),
             ("truncated", good[:-2], ["header says"])]
    for name, data, words in cases:
        path = write(name + ".bin", data)
        expect_format_error(lambda: loomfmt.read_token_file(path), *words)
    proc = run_reference(["--config", wd.config, "--checkpoint",
                          wd.checkpoint, "--data", wd.path("magic.bin")], 1)
    assert "bad magic" in proc.stderr, proc.stderr


def test_cli_steps_and_compare(wd):
    base = ["--config", wd.config, "--checkpoint",
            wd.checkpoint, "--data", wd.data, "--batch", str(B), "--seq", str(T)]
    out = wd.path("ref.jsonl")
    # The one real subprocess run of the script; the rest run in-process.
    run_cli([PYTHON, REFERENCE] + base + ["--steps", "7", "--out", out], 0)
    with open(out) as f:
        lines = [json.loads(line) for line in f]
    assert [r["step"] for r in lines] == list(range(7))
    tokens = loomfmt.read_token_file(wd.data)
    model = ref.GPT2(CFG, ref.load_weights(CFG, wd.checkpoint))
    for r in lines:
        (_, want), = ref.step_losses(model, tokens, B, T, [r["step"]])
        assert r["loss"] == want, (r, want)
    assert lines[5]["loss"] == lines[0]["loss"]  # nb = 5: step 5 wraps to 0

    # A Loom-shaped log: extra fields, a summary line, float32 round-off.
    log = wd.path("loom.jsonl")
    with open(log, "w") as f:
        for r in lines:
            loss = float(np.float32(r["loss"]) * np.float32(1 + 3e-7))
            f.write(json.dumps({"step": r["step"], "loss": loss,
                                "step_ms": 1.5, "tokens_per_s": 1e4}) + "\n")
        f.write(json.dumps({"summary": True, "steps": 7}) + "\n")
    proc = run_reference(base + ["--steps", "7", "--compare", log, "--rtol", "1e-5"], 0)
    assert "PASS" in proc.stdout and "rel.diff" in proc.stdout, proc.stdout
    run_reference(base + ["--compare", log], 0)  # steps taken from the log
    run_reference(base + ["--compare", log, "--double", "--rtol", "1e-5"], 0)

    # A loss off by 1e-3 relative fails; so do missing or extra steps.
    bad = wd.path("bad.jsonl")
    with open(bad, "w") as f:
        for r in lines:
            loss = r["loss"] * (1.001 if r["step"] == 3 else 1.0)
            f.write(json.dumps({"step": r["step"], "loss": loss}) + "\n")
    proc = run_reference(base + ["--steps", "7", "--compare", bad], 1)
    assert "FAIL" in proc.stdout and "> rtol" in proc.stdout, proc.stdout
    short = wd.path("short.jsonl")
    with open(short, "w") as f:
        for r in lines[:6]:
            f.write(json.dumps(r) + "\n")
    proc = run_reference(base + ["--steps", "7", "--compare", short], 1)
    assert "missing from the loom log" in proc.stdout, proc.stdout
    garbage = wd.path("garbage.jsonl")
    with open(garbage, "w") as f:
        f.write('{"step": 0, "loss": 1.0}\nnot json\n')
    proc = run_reference(base + ["--compare", garbage], 1)
    assert "garbage.jsonl:2" in proc.stderr, proc.stderr


def test_init_check_cli(wd):
    proc = run_reference(["--config", wd.config, "--init-check",
                          "--data", wd.data, "--batch", str(B), "--seq", str(T)], 0)
    first, second = (json.loads(line) for line in proc.stdout.splitlines())
    assert abs(first["expected_init_loss"] - math.log(256)) < 1e-12
    assert abs(second["loss"] - math.log(256)) < 0.1, second
    bad = wd.path("bad_config.json")
    with open(bad, "w") as f:
        json.dump({"n_layer": 2, "n_head": 3, "n_embd": 32, "vocab_size": 256,
                   "n_positions": 32}, f)
    proc = run_reference(["--config", bad, "--init-check"], 1)
    assert "not divisible" in proc.stderr, proc.stderr


def test_tokenize_script(wd):
    text = wd.path("a.txt")
    with open(text, "wb") as f:
        f.write("Hello, wörld!\n".encode() * 50)
    out, val = wd.path("train.bin"), wd.path("val.bin")
    run_cli([PYTHON, TOKENIZE, text, text, "-o", out, "--val-fraction", "0.1",
             "--val-out", val], 0)
    train_tokens = loomfmt.read_token_file(out)
    val_tokens = loomfmt.read_token_file(val)
    with open(text, "rb") as f:
        raw = f.read() * 2
    assert len(val_tokens) == round(len(raw) * 0.1)
    assert bytes(np.concatenate([train_tokens, val_tokens]).astype(np.uint8)) == raw
    proc = run_cli([PYTHON, TOKENIZE, "--inspect", out], 0)
    assert f"tokens:   {len(train_tokens)}" in proc.stdout, proc.stdout
    assert "Hello, w" in proc.stdout, proc.stdout
    # Errors: missing input, empty input, bad token files.
    proc = run_cli([PYTHON, TOKENIZE, wd.path("missing.txt"), "-o", out], 1)
    assert "does not exist" in proc.stderr, proc.stderr
    empty = wd.path("empty.txt")
    open(empty, "w").close()
    proc = run_cli([PYTHON, TOKENIZE, empty, "-o", out], 1)
    assert "is empty" in proc.stderr, proc.stderr
    with open(out, "rb") as f:
        good = bytearray(f.read())
    for offset, value, words in ((0, 123, "bad magic"), (4, 7, "version 7"),
                                 (8, 5, "header says 5 tokens")):
        broken = bytearray(good)
        broken[offset:offset + 4] = struct.pack("<i", value)
        path = wd.path("broken.bin")
        with open(path, "wb") as f:
            f.write(broken)
        proc = run_cli([PYTHON, TOKENIZE, "--inspect", path], 1)
        assert words in proc.stderr, proc.stderr


def test_tokenize_bpe_flags(wd):
    text = wd.path("doc.txt")
    with open(text, "w", encoding="utf-8") as f:
        f.write("the cat sat on the mat; the cat's hat. " * 40)
    tok, out = wd.path("tok.bin"), wd.path("bpe.bin")
    proc = run_cli([PYTHON, TOKENIZE, text, text, "-o", out, "--bpe-vocab",
                    "270", "--save-tokenizer", tok], 0)
    assert "270 tokens (256 bytes, 13 merges, end-of-text 269)" in proc.stdout
    tokens = list(loomfmt.read_token_file(out))
    # Each input is a document that starts with end-of-text.
    assert tokens[0] == 269 and tokens.count(269) == 2, tokens[:8]
    assert len(tokens) < 40 * 39, len(tokens)  # under half the bytes
    proc = run_cli([PYTHON, TOKENIZE, "--inspect", out, "--tokenizer", tok], 0)
    assert '"<|endoftext|>the cat sat on the mat' in proc.stdout, proc.stdout
    # Few pairs: the table stops early and says what vocab_size to use.
    tiny = wd.path("tiny.txt")
    with open(tiny, "w") as f:
        f.write("ab ab")
    proc = run_cli([PYTHON, TOKENIZE, tiny, "-o", out, "--bpe-vocab", "400",
                    "--save-tokenizer", tok], 0)
    assert "set the config's vocab_size to 259" in proc.stdout, proc.stdout
    # Errors.
    for args, words in (
            (["--bpe-vocab", "300"], "go together"),
            (["--bpe-vocab", "200", "--save-tokenizer", tok], ">= 257"),
            (["--tokenizer", tok, "--bpe-vocab", "300", "--save-tokenizer",
              tok], "pass one of them"),
            (["--tokenizer", text], "not 20240328")):
        proc = run_cli([PYTHON, TOKENIZE, text, "-o", out] + args, 1)
        assert words in proc.stderr, (args, proc.stderr)
    latin1 = wd.path("latin1.txt")
    with open(latin1, "wb") as f:
        f.write(b"caf\xe9")
    proc = run_cli([PYTHON, TOKENIZE, latin1, "-o", out, "--tokenizer", tok],
                   1)
    assert "byte 3 is not UTF-8" in proc.stderr, proc.stderr
    with open(tok, "rb") as f:
        table = f.read()
    cut = wd.path("cut.bin")
    with open(cut, "wb") as f:
        f.write(table[:-3])
    proc = run_cli([PYTHON, TOKENIZE, text, "-o", out, "--tokenizer", cut], 1)
    assert "empty or cut off" in proc.stderr, proc.stderr
    # Tables token files cannot use: ids past uint16, no end-of-text token.
    def write_table(path, version, tokens, eot):
        body = bytearray(struct.pack("<256i", 20240328, version, len(tokens),
                                     eot, *([0] * 252)))
        for t in tokens:
            body += bytes([len(t)]) + t
        with open(path, "wb") as f:
            f.write(body)
    single = [bytes([b]) for b in range(256)]
    wide = single + [bytes([a, b]) for a in range(256) for b in range(256)]
    write_table(tok, 2, wide[:65537], 65536)
    proc = run_cli([PYTHON, TOKENIZE, text, "-o", out, "--tokenizer", tok], 1)
    assert "has 65537 tokens; token files hold uint16 ids (at most 65536" \
        in proc.stderr, proc.stderr
    write_table(tok, 1, single + [b"th", b"he"], 0)
    proc = run_cli([PYTHON, TOKENIZE, text, "-o", out, "--tokenizer", tok], 1)
    assert "names no end-of-text token" in proc.stderr, proc.stderr

#===----------------------------------------------------------------------===#
# Training (--train)
#===----------------------------------------------------------------------===#

TB = 4  # batch for the training tests: divisible by 2 and 4 micro-batches
NO_DECAY_SUFFIXES = ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias",
                     "ln_f.weight", "ln_f.bias")


def independent_lr(s, lr, min_lr, warmup, schedule, S):
    if warmup > 0 and s < warmup:
        return lr * (s + 1) / warmup
    if schedule == "constant":
        return lr
    progress = min(1.0, max(0.0, (s - warmup) / max(1, S - warmup)))
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * progress)) / 2


def independent_train(cfg, w0, tokens, steps, B_, T_, M=1, lr=1e-3,
                      min_lr=0.0, warmup=0, schedule="cosine", S=None,
                      wd=0.01, clip=1.0, b1=0.9, b2=0.999, eps=1e-8,
                      dtype=torch.float64):
    """Training written from the definitions: F.cross_entropy losses,
    torch.autograd.grad per micro-batch, weight-decay groups chosen by
    name, a hand-written AdamW and clip. Returns (records, final weights)."""
    S = steps if S is None else S
    w = {k: v.to(dtype).clone().requires_grad_(True) for k, v in w0.items()}
    names = list(w)
    no_decay = {k for k in names
                if k.endswith(".bias") or k.endswith(NO_DECAY_SUFFIXES)}
    m = {k: torch.zeros_like(w[k]) for k in names}
    v = {k: torch.zeros_like(w[k]) for k in names}
    nb = (len(tokens) - 1) // (B_ * T_)
    records = []
    for s in range(steps):
        lr_s = independent_lr(s, lr, min_lr, warmup, schedule, S)
        off = (s % nb) * B_ * T_
        rows = [np.asarray(tokens[off + r * T_: off + r * T_ + T_ + 1],
                           dtype=np.int64) for r in range(B_)]
        x = torch.tensor(np.stack([r[:-1] for r in rows]))
        y = torch.tensor(np.stack([r[1:] for r in rows]))
        grads = {k: torch.zeros_like(w[k]) for k in names}
        losses = []
        per = B_ // M
        for i in range(M):
            xs, ys = x[i * per:(i + 1) * per], y[i * per:(i + 1) * per]
            logits = independent_forward(cfg, w, xs)
            loss = F.cross_entropy(logits.reshape(-1, cfg.vocab_size),
                                   ys.reshape(-1))
            for k, g in zip(names, torch.autograd.grad(loss, [w[k] for k in names])):
                grads[k] += g / M
            losses.append(float(loss))
        norm = math.sqrt(sum(float((g.double() ** 2).sum())
                             for g in grads.values()))
        if clip > 0 and clip / (norm + 1e-6) < 1:
            for k in names:
                grads[k] = grads[k] * (clip / (norm + 1e-6))
        t = s + 1
        with torch.no_grad():
            for k in names:
                g = grads[k]
                if k not in no_decay:
                    w[k] -= lr_s * wd * w[k]
                m[k] = b1 * m[k] + (1 - b1) * g
                v[k] = b2 * v[k] + (1 - b2) * g * g
                m_hat = m[k] / (1 - b1 ** t)
                v_hat = v[k] / (1 - b2 ** t)
                w[k] -= lr_s * m_hat / (v_hat.sqrt() + eps)
        records.append({"step": s, "loss": sum(losses) / M, "lr": lr_s,
                        "grad_norm": norm})
    return records, {k: t.detach() for k, t in w.items()}


def reference_train(cfg, w0, tokens, steps, B_, T_, dtype=torch.float64,
                    **hp):
    tc = ref.TrainConfig(batch=B_, seq=T_, steps=steps, **hp)
    trainer = ref.Trainer(cfg, {k: v.to(dtype) for k, v in w0.items()}, tc)
    records = list(ref.train_records(cfg, None, tokens, tc, 0, trainer))
    return records, trainer


def assert_records_close(a, b, rtol, what=""):
    assert [r["step"] for r in a] == [r["step"] for r in b], (what, a, b)
    for x, y in zip(a, b):
        for key in ("loss", "lr", "grad_norm"):
            d = abs(x[key] - y[key]) / max(abs(y[key]), 1e-30)
            assert d <= rtol, (what, key, x, y, d)


def test_train_matches_independent_loop(wd):
    tokens = loomfmt.read_token_file(wd.data)
    # Clipping active (random weights have |g| ~ 3): a large eps makes
    # Adam's step depend on the clip coefficient, so it is really checked.
    cases = [dict(lr=3e-3, min_lr=1e-4, warmup=2, lr_schedule="cosine",
                  schedule_steps=5, wd=0.1, clip=1.0, eps=1e-3),
             dict(microbatches=2, lr=2e-3, lr_schedule="constant", wd=0.01,
                  clip=0.0, beta1=0.8, beta2=0.95, eps=1e-6),
             dict(microbatches=4, lr=1e-3, warmup=1, wd=0.05, clip=2.5)]
    for hp in cases:
        got, trainer = reference_train(CFG, wd.weights, tokens, 6, TB, T, **hp)
        want, w_want = independent_train(
            CFG, wd.weights, tokens, 6, TB, T, M=hp.get("microbatches", 1),
            lr=hp["lr"], min_lr=hp.get("min_lr", 0.0),
            warmup=hp.get("warmup", 0),
            schedule=hp.get("lr_schedule", "cosine"),
            S=hp.get("schedule_steps"), wd=hp["wd"], clip=hp["clip"],
            b1=hp.get("beta1", 0.9), b2=hp.get("beta2", 0.999),
            eps=hp["eps"] if "eps" in hp else 1e-8)
        assert_records_close(got, want, 1e-9, hp)
        # bench/train_cpu's fused-op variant trains the same way.
        tc = ref.TrainConfig(batch=TB, seq=T, steps=6, **hp)
        fast = ref.Trainer(CFG, {k: v.double() for k, v in wd.weights.items()},
                           tc, model_cls=ref.GPT2Builtin)
        assert_records_close(list(ref.train_records(CFG, None, tokens, tc, 0,
                                                    fast)), want, 1e-9, hp)
        for k, value in w_want.items():
            assert torch.allclose(trainer.params[k].detach(), value,
                                  rtol=0, atol=1e-10), (hp, k)
        if hp is cases[0]:  # clipping was active at every step
            assert min(r["grad_norm"] for r in got) > hp["clip"], got


def test_train_microbatches_equal_full_batch(wd):
    tokens = loomfmt.read_token_file(wd.data)
    hp = dict(lr=3e-3, warmup=1, clip=1.0)
    full, _ = reference_train(CFG, wd.weights, tokens, 5, TB, T, **hp)
    for M in (2, 4):
        part, _ = reference_train(CFG, wd.weights, tokens, 5, TB, T,
                                  microbatches=M, **hp)
        assert_records_close(part, full, 1e-10, f"M={M} float64")
    f32, _ = reference_train(CFG, wd.weights, tokens, 5, TB, T,
                             dtype=torch.float32, **hp)
    f32m, _ = reference_train(CFG, wd.weights, tokens, 5, TB, T,
                              dtype=torch.float32, microbatches=2, **hp)
    assert_records_close(f32m, f32, 1e-6, "M=2 float32")
    assert_records_close(f32, full, 1e-5, "float32 vs float64")


def test_train_clipping(wd):
    tokens = loomfmt.read_token_file(wd.data)
    off, _ = reference_train(CFG, wd.weights, tokens, 4, TB, T, clip=0.0)
    huge, _ = reference_train(CFG, wd.weights, tokens, 4, TB, T, clip=1e9)
    assert off == huge, (off, huge)  # inactive clip: bit-identical
    norm0 = off[0]["grad_norm"]
    assert norm0 > 1.0, norm0
    # Active: the logged norm is the pre-clip one; the grads the optimizer
    # saw (still in .grad after the step) have norm clip*norm/(norm+1e-6).
    clip = 0.25 * norm0
    tc = ref.TrainConfig(batch=TB, seq=T, steps=1, clip=clip, eps=1e-3)
    trainer = ref.Trainer(CFG, {k: v.double() for k, v in wd.weights.items()},
                          tc)
    rec = trainer.step(tokens, 0)
    assert abs(rec["grad_norm"] - norm0) <= 1e-12 * norm0, (rec, norm0)
    after = math.sqrt(sum(float((p.grad ** 2).sum())
                          for p in trainer.params.values()))
    assert abs(after - clip * norm0 / (norm0 + 1e-6)) <= 1e-9 * clip, after
    # Inactive: .grad keeps the full norm.
    tc = ref.TrainConfig(batch=TB, seq=T, steps=1, clip=10 * norm0)
    trainer = ref.Trainer(CFG, {k: v.double() for k, v in wd.weights.items()},
                          tc)
    trainer.step(tokens, 0)
    after = math.sqrt(sum(float((p.grad ** 2).sum())
                          for p in trainer.params.values()))
    assert abs(after - norm0) <= 1e-12 * norm0, (after, norm0)
    # With a large eps the clipped trajectory differs from the unclipped.
    a, _ = reference_train(CFG, wd.weights, tokens, 3, TB, T, clip=0.0, eps=1e-3)
    b, _ = reference_train(CFG, wd.weights, tokens, 3, TB, T, clip=clip, eps=1e-3)
    assert a[0]["loss"] == b[0]["loss"]
    assert abs(a[2]["loss"] - b[2]["loss"]) > 1e-6 * abs(a[2]["loss"]), (a, b)


def test_lr_schedule_values(wd):
    lr = ref.lr_at
    cases = [
        # (step, lr, min_lr, warmup, schedule, S) -> value
        ((0, 1e-3, 0.0, 4, "cosine", 10), 2.5e-4),
        ((1, 1e-3, 0.0, 4, "cosine", 10), 5e-4),
        ((3, 1e-3, 0.0, 4, "cosine", 10), 1e-3),
        ((4, 1e-3, 0.0, 4, "cosine", 10), 1e-3),          # p = 0
        ((7, 1e-3, 0.0, 4, "cosine", 10), 5e-4),          # p = 1/2
        ((10, 1e-3, 0.0, 4, "cosine", 10), 0.0),          # p = 1
        ((0, 1e-3, 1e-4, 0, "cosine", 10), 1e-3),
        ((5, 1e-3, 1e-4, 0, "cosine", 10), 5.5e-4),
        ((10, 1e-3, 1e-4, 0, "cosine", 10), 1e-4),
        ((25, 1e-3, 1e-4, 0, "cosine", 10), 1e-4),        # clamped
        ((2, 1.0, 0.0, 0, "cosine", 8), 0.5 + 0.5 * math.cos(math.pi / 4)),
        ((0, 6e-4, 0.0, 3, "constant", 10), 2e-4),
        ((2, 6e-4, 0.0, 3, "constant", 10), 6e-4),
        ((99, 6e-4, 0.0, 3, "constant", 10), 6e-4),
        ((2, 1.0, 0.0, 2, "cosine", 2), 1.0),             # S = W: p = 0
        ((3, 1.0, 0.0, 2, "cosine", 2), 0.0),             #        p = 1
        ((0, 1.0, 0.0, 0, "cosine", 0), 1.0),             # S = 0
    ]
    for (s, *rest), want in cases:
        got = lr(s, *rest)
        assert abs(got - want) <= 1e-15 + 1e-12 * abs(want), (s, rest, got, want)
        assert abs(independent_lr(s, *rest) - want) <= 1e-15 + 1e-12 * abs(want)
    # The CLI logs those values; S defaults to --steps.
    base = ["--config", wd.config, "--checkpoint", wd.checkpoint, "--data",
            wd.data, "--batch", str(TB), "--seq", str(T), "--train"]
    proc = run_reference(base + ["--steps", "6", "--warmup", "2", "--lr",
                                 "0.01", "--min-lr", "0.001"], 0)
    lrs = [json.loads(line)["lr"] for line in proc.stdout.splitlines()]
    want = [lr(s, 0.01, 0.001, 2, "cosine", 6) for s in range(6)]
    assert lrs == want, (lrs, want)
    for s, value in ((0, 0.005), (1, 0.01), (2, 0.01), (4, 0.0055)):
        assert abs(lrs[s] - value) <= 1e-15, lrs


def test_train_param_groups(wd):
    tc = ref.TrainConfig(batch=TB, seq=T, steps=1, wd=0.2)
    trainer = ref.Trainer(CFG, wd.weights, tc)
    decay, no_decay = trainer.optimizer.param_groups
    assert decay["weight_decay"] == 0.2 and no_decay["weight_decay"] == 0.0
    by_id = {id(p): k for k, p in trainer.params.items()}
    decay_names = {by_id[id(p)] for p in decay["params"]}
    no_decay_names = {by_id[id(p)] for p in no_decay["params"]}
    want_decay = {"wte.weight", "wpe.weight"} | {
        f"h.{i}.{m}.weight" for i in range(CFG.n_layer)
        for m in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")}
    assert decay_names == want_decay, decay_names ^ want_decay
    assert no_decay_names == set(ref.weight_shapes(CFG)) - want_decay
    # One wte parameter: 2 + 12 * n_layer + 2 tensors, no lm_head copy.
    assert len(decay["params"]) + len(no_decay["params"]) == 2 + 12 * 2 + 2
    # wte is one parameter: its gradient is the embedding's plus the LM
    # head's, computed here with two separate leaves (clip off, M = 2).
    tokens = loomfmt.read_token_file(wd.data)
    tc = ref.TrainConfig(batch=TB, seq=T, steps=1, clip=0.0, microbatches=2)
    trainer = ref.Trainer(CFG, {k: v.double() for k, v in wd.weights.items()},
                          tc)
    trainer.step(tokens, 0)
    x, y = (torch.from_numpy(a) for a in loomfmt.get_batch(tokens, TB, T, 0))
    w = {k: v.double().requires_grad_(True) for k, v in wd.weights.items()}
    head = wd.weights["wte.weight"].double().requires_grad_(True)
    loss = F.cross_entropy(independent_forward(CFG, w, x, head=head)
                           .reshape(-1, 256), y.reshape(-1))
    g_emb, g_head = torch.autograd.grad(loss, [w["wte.weight"], head])
    assert float(g_emb.abs().sum()) > 0 and float(g_head.abs().sum()) > 0
    assert torch.allclose(trainer.params["wte.weight"].grad, g_emb + g_head,
                          rtol=0, atol=1e-12)
    assert not torch.allclose(g_emb + g_head, g_head, rtol=0, atol=1e-6)


def test_train_resume_and_checkpoint(wd):
    base = ["--config", wd.config, "--data", wd.data, "--batch", str(TB),
            "--seq", str(T), "--train", "--warmup", "1", "--lr", "3e-3"]
    full, part1, part2 = (wd.path(n) for n in ("full.jsonl", "p1.jsonl",
                                               "p2.jsonl"))
    ckpt_full, ckpt_half, ckpt_end = (wd.path(n) for n in (
        "full.safetensors", "half.safetensors", "end.safetensors"))
    run_reference(base + ["--checkpoint", wd.checkpoint, "--steps", "6",
                          "--out", full, "--save-checkpoint", ckpt_full], 0)
    run_reference(base + ["--checkpoint", wd.checkpoint, "--steps", "3",
                          "--schedule-steps", "6", "--out", part1,
                          "--save-checkpoint", ckpt_half], 0)
    tensors, meta = loomfmt.read_safetensors(ckpt_half)
    assert meta["step"] == "3", meta
    assert len(tensors) == 3 * len(ref.weight_shapes(CFG))
    assert "optimizer.exp_avg.wte.weight" in tensors
    assert "optimizer.exp_avg_sq.h.1.ln_2.bias" in tensors
    run_reference(base + ["--checkpoint", ckpt_half, "--resume", "--steps",
                          "6", "--out", part2, "--save-checkpoint",
                          ckpt_end], 0)

    def read(path):
        with open(path) as f:
            return [json.loads(line) for line in f]
    assert read(part1) + read(part2) == read(full)  # bit-identical
    a, _ = loomfmt.read_safetensors(ckpt_full)
    b, meta = loomfmt.read_safetensors(ckpt_end)
    assert meta["step"] == "6" and set(a) == set(b)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    # The saved weights are the trainer's; they load for eval.
    ref.load_weights(CFG, ckpt_end)
    # Compare against a resumed log that also has the earlier steps.
    proc = run_reference(base + ["--checkpoint", ckpt_half, "--resume",
                                 "--steps", "6", "--compare", full], 0)
    assert "ignoring 3 earlier" in proc.stdout and "PASS" in proc.stdout
    # Errors: no moments, nothing left to do, --resume without --train.
    proc = run_reference(base + ["--checkpoint", wd.checkpoint, "--resume",
                                 "--steps", "6"], 1)
    assert "metadata \"step\"" in proc.stderr, proc.stderr
    proc = run_reference(base + ["--checkpoint", ckpt_end, "--resume",
                                 "--steps", "6"], 1)
    assert "leaves nothing" in proc.stderr, proc.stderr
    stripped = wd.path("stripped.safetensors")
    loomfmt.write_safetensors(stripped, {k: v for k, v in a.items()
                                         if "exp_avg_sq.wpe" not in k},
                              metadata={"step": 6})
    proc = run_reference(base + ["--checkpoint", stripped, "--resume",
                                 "--steps", "8"], 1)
    assert "optimizer.exp_avg.wpe.weight" in proc.stderr, proc.stderr
    run_reference(["--config", wd.config, "--checkpoint", wd.checkpoint,
                   "--data", wd.data, "--resume"], 2)
    proc = run_reference(base + ["--checkpoint", wd.checkpoint,
                                 "--microbatches", "3"], 2)
    assert "not divisible" in proc.stderr, proc.stderr


def test_train_cli_compare(wd):
    base = ["--config", wd.config, "--checkpoint", wd.checkpoint, "--data",
            wd.data, "--batch", str(TB), "--seq", str(T), "--train",
            "--microbatches", "2", "--warmup", "2", "--clip", "0.5"]
    # One real subprocess run: JSON lines on stdout, no traceback.
    proc = run_cli([PYTHON, REFERENCE] + base + ["--steps", "5"], 0)
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [sorted(r) for r in lines] == [["grad_norm", "loss", "lr", "step"]] * 5
    assert [r["step"] for r in lines] == list(range(5))

    def write_log(name, edit=lambda r: r):
        path = wd.path(name)
        with open(path, "w") as f:
            for r in lines:
                r = dict(r, loss=float(np.float32(r["loss"]) * np.float32(1 + 3e-7)),
                         grad_norm=float(np.float32(r["grad_norm"])),
                         step_ms=2.5, tokens_per_s=1e4)
                r = edit(r)
                if r is not None:
                    f.write(json.dumps(r) + "\n")
            f.write(json.dumps({"summary": True, "ranks": [{"rss_peak_bytes": 1}]})
                    + "\n")
        return path

    good = write_log("train-good.jsonl")
    proc = run_reference(base + ["--compare", good], 0)  # steps from the log
    assert "PASS: 5 reference step(s), 5 loom step(s)" in proc.stdout, proc.stdout
    assert "gnorm" in proc.stdout
    bad_cases = [
        ("loss", lambda r: dict(r, loss=r["loss"] * (1.001 if r["step"] == 2 else 1))),
        ("lr", lambda r: dict(r, lr=r["lr"] * (1 + 1e-5 if r["step"] == 3 else 1))),
        ("grad_norm", lambda r: dict(r, grad_norm=r["grad_norm"] * (1.01 if r["step"] == 1 else 1))),
        ("lacks grad_norm", lambda r: {k: v for k, v in r.items() if k != "grad_norm"}),
        ("missing from the loom log", lambda r: None if r["step"] == 4 else r),
    ]
    for word, edit in bad_cases:
        path = write_log("train-bad.jsonl", edit)
        proc = run_reference(base + ["--steps", "5", "--compare", path], 1)
        assert "FAIL" in proc.stdout and word in proc.stdout, (word, proc.stdout)


def test_compare_weights_cli(wd):
    import compare_weights as cw

    def run(args, expect_rc):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cw.main(args)
            except SystemExit as e:
                rc = e.code
        assert rc == expect_rc, (args, rc, out.getvalue(), err.getvalue())
        return out.getvalue(), err.getvalue()

    tensors, _ = loomfmt.read_safetensors(wd.checkpoint)
    tensors = {k: np.array(v) for k, v in tensors.items()}
    same = wd.path("cw-same.safetensors")
    # Same weights under "transformer.", different optimizer state: PASS.
    loomfmt.write_safetensors(same, {
        ("transformer." + k if not k.startswith("optimizer.") else k):
        (v + 1 if k.startswith("optimizer.") else v) for k, v in tensors.items()})
    out, _ = run([wd.checkpoint, same, "--rtol", "0"], 0)
    assert out.splitlines()[-1].startswith("PASS") and "max rel 0.000e+00" in out
    run([wd.checkpoint, same, "--include-optimizer"], 1)
    moved = dict(tensors)
    scale = float(np.abs(tensors["h.0.mlp.c_fc.weight"]).max())
    moved["h.0.mlp.c_fc.weight"] = tensors["h.0.mlp.c_fc.weight"].copy()
    moved["h.0.mlp.c_fc.weight"][3, 5] += 2e-3 * scale
    path = wd.path("cw-moved.safetensors")
    loomfmt.write_safetensors(path, moved)
    out, _ = run([path, wd.checkpoint, "--rtol", "1e-3"], 1)
    line = [x for x in out.splitlines() if x.startswith("h.0.mlp.c_fc.weight")][0]
    assert "> rtol" in line and abs(float(line.split()[2]) - 2e-3) < 1e-5, line
    run([path, wd.checkpoint, "--rtol", "3e-3"], 0)
    del moved["ln_f.bias"]
    loomfmt.write_safetensors(path, moved)
    out, _ = run([path, wd.checkpoint, "--rtol", "1"], 1)
    assert "ln_f.bias" in out and "only in B" in out, out
    _, err = run([wd.path("nope.safetensors"), wd.checkpoint], 1)
    assert err.startswith("compare_weights: error:"), err


#===----------------------------------------------------------------------===#
# Runner
#===----------------------------------------------------------------------===#

def main():
    torch.set_num_threads(2)
    tests = [(name, fn) for name, fn in globals().items()
             if name.startswith("test_") and callable(fn)]
    wd = Workdir()
    passed = failed = 0
    try:
        for name, fn in tests:
            try:
                fn(wd)
                passed += 1
                print(f"PASS {name}")
            except Exception:  # noqa: BLE001 - report every failure
                failed += 1
                print(f"FAIL {name}")
                traceback.print_exc()
    finally:
        wd.tmp.cleanup()
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
