#!/usr/bin/python3
"""Self-test of the e2e helpers: loomfmt, gpt2_reference and scripts/tokenize.

Builds a random tiny GPT-2 in torch, writes it as safetensors with loomfmt,
writes a token file, and checks that gpt2_reference's loss equals
F.cross_entropy over a forward written here independently (torch built-ins:
F.layer_norm, F.gelu(approximate="tanh"), F.linear, a per-head loop with an
explicit masked softmax). Also checks the batch layout, the CLI (JSON lines,
--compare pass/fail), and that corrupt checkpoints, token files and logs give
a clear error rather than a traceback.

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


def independent_forward(cfg, w, idx):
    """Logits [B, T, V] from torch built-ins, one head at a time."""
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
    return F.linear(x, w["wte.weight"])


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
