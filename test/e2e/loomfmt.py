"""loomfmt: readers and writers for the file formats Loom shares with others.

* safetensors (the checkpoint format, DESIGN.md section 5): 8-byte
  little-endian u64 header length N, N bytes of JSON
  {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {}},
  then the data buffer; offsets are relative to the buffer start.
* llm.c / nanoGPT token files: 256 little-endian int32 (magic 20240520,
  version 1, token count, zeros), then the tokens as little-endian uint16.
* the batch a step reads from a token file.

numpy only (no torch, no HF packages), so any python3 with numpy can use it.
Every malformed input raises FormatError with a message naming the file and
what is wrong; callers print it and exit 1.
"""
import json
import os
import struct

import numpy as np

TOKEN_MAGIC = 20240520
TOKEN_VERSION = 1
TOKEN_HEADER_INTS = 256
TOKEN_HEADER_BYTES = TOKEN_HEADER_INTS * 4

# safetensors dtype name -> numpy little-endian dtype. BF16 is read as raw
# uint16 and widened to float32 by read_safetensors.
SAFETENSORS_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_NUMPY_TO_SAFETENSORS = {
    np.dtype("float64"): "F64", np.dtype("float32"): "F32",
    np.dtype("float16"): "F16", np.dtype("int64"): "I64",
    np.dtype("int32"): "I32", np.dtype("int16"): "I16", np.dtype("int8"): "I8",
    np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL",
}
# Refuse headers larger than this (the HF reader uses 100 MB as well).
MAX_SAFETENSORS_HEADER = 100 * 1024 * 1024


class FormatError(Exception):
    """A file that does not follow its format, or does not fit the model."""


def _atomic_write(path, chunks):
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
    os.replace(tmp, path)


#===----------------------------------------------------------------------===#
# safetensors
#===----------------------------------------------------------------------===#

def write_safetensors(path, tensors, metadata=None):
    """Writes {name: numpy array (or torch tensor)} as safetensors, atomically.

    Tensors are laid out in name order, each starting 8-byte aligned in the
    buffer as the HF writer does; the JSON header is space-padded to 8 bytes.
    """
    header = {}
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blobs = []
    offset = 0
    for name in sorted(tensors):
        value = tensors[name]
        if hasattr(value, "detach"):  # torch tensor, without importing torch
            value = value.detach().cpu().numpy()
        array = np.asarray(value, order="C")
        if array.dtype not in _NUMPY_TO_SAFETENSORS:
            raise FormatError(f"{name}: cannot store dtype {array.dtype}")
        data = array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _NUMPY_TO_SAFETENSORS[array.dtype],
                        "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        pad = (-len(data)) % 8
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text)) % 8)
    _atomic_write(path, [struct.pack("<Q", len(text)), text] + blobs)


def read_safetensors(path):
    """Returns ({name: numpy array}, metadata dict); raises FormatError.

    Checks everything a reader can: the header length against the file size,
    the JSON, every entry's dtype, shape and offsets, that the byte count of
    each tensor matches its shape, and that tensors do not overlap.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise FormatError(f"cannot read checkpoint {path}: {e.strerror}")
    if len(data) < 8:
        raise FormatError(f"{path}: {len(data)} bytes, too short for a "
                          "safetensors file (8-byte header length missing)")
    (n,) = struct.unpack_from("<Q", data, 0)
    if n > MAX_SAFETENSORS_HEADER or 8 + n > len(data):
        raise FormatError(f"{path}: header length {n} does not fit in the "
                          f"{len(data)}-byte file; not a safetensors file or "
                          "truncated")
    try:
        header = json.loads(data[8:8 + n].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise FormatError(f"{path}: header is not valid JSON ({e})")
    if not isinstance(header, dict):
        raise FormatError(f"{path}: header is not a JSON object")
    buffer = memoryview(data)[8 + n:]
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise FormatError(f"{path}: __metadata__ is not a JSON object")
    tensors = {}
    spans = []
    for name, entry in header.items():
        where = f"{path}: tensor {name!r}"
        if not isinstance(entry, dict):
            raise FormatError(f"{where}: entry is not a JSON object")
        dtype_name = entry.get("dtype")
        shape = entry.get("shape")
        offsets = entry.get("data_offsets")
        if dtype_name not in SAFETENSORS_DTYPES:
            raise FormatError(f"{where}: unsupported dtype {dtype_name!r}")
        if (not isinstance(shape, list) or
                not all(isinstance(d, int) and d >= 0 for d in shape)):
            raise FormatError(f"{where}: bad shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2 or
                not all(isinstance(o, int) for o in offsets)):
            raise FormatError(f"{where}: bad data_offsets {offsets!r}")
        begin, end = offsets
        if not 0 <= begin <= end <= len(buffer):
            raise FormatError(
                f"{where}: data_offsets [{begin}, {end}] outside the "
                f"{len(buffer)}-byte data buffer (file truncated?)")
        dtype = SAFETENSORS_DTYPES[dtype_name]
        count = int(np.prod(shape, dtype=np.int64))
        if (end - begin) != count * dtype.itemsize:
            raise FormatError(
                f"{where}: shape {shape} of {dtype_name} needs "
                f"{count * dtype.itemsize} bytes, data_offsets give "
                f"{end - begin}")
        array = np.frombuffer(buffer[begin:end], dtype=dtype).reshape(shape)
        if dtype_name == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array
        if end > begin:
            spans.append((begin, end, name))
    spans.sort()
    for (b0, e0, n0), (b1, e1, n1) in zip(spans, spans[1:]):
        if b1 < e0:
            raise FormatError(f"{path}: tensors {n0!r} and {n1!r} overlap")
    return tensors, metadata


#===----------------------------------------------------------------------===#
# Token files
#===----------------------------------------------------------------------===#

def write_token_file(path, tokens):
    """Writes a sequence of ints in [0, 65536) as a token file, atomically."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 0xFFFF):
        raise FormatError(f"{path}: tokens must fit in uint16")
    header = np.zeros(TOKEN_HEADER_INTS, dtype="<i4")
    header[0], header[1], header[2] = TOKEN_MAGIC, TOKEN_VERSION, tokens.size
    _atomic_write(path, [header.tobytes(),
                         tokens.astype("<u2").reshape(-1).tobytes()])


def read_token_file(path):
    """Returns the tokens of a token file as a numpy uint16 array.

    Raises FormatError for a short file, bad magic, bad version, or a token
    count that disagrees with the file size.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise FormatError(f"cannot read token file {path}: {e.strerror}")
    if len(data) < TOKEN_HEADER_BYTES:
        raise FormatError(f"{path}: {len(data)} bytes, shorter than the "
                          f"{TOKEN_HEADER_BYTES}-byte token file header")
    header = np.frombuffer(data, dtype="<i4", count=TOKEN_HEADER_INTS)
    if header[0] != TOKEN_MAGIC:
        raise FormatError(f"{path}: bad magic {header[0]} (expected "
                          f"{TOKEN_MAGIC}); not a llm.c/nanoGPT token file")
    if header[1] != TOKEN_VERSION:
        raise FormatError(f"{path}: unsupported token file version "
                          f"{header[1]} (expected {TOKEN_VERSION})")
    count = int(header[2])
    body = len(data) - TOKEN_HEADER_BYTES
    if count < 0 or body != 2 * count:
        raise FormatError(f"{path}: header says {count} tokens "
                          f"({2 * count} bytes) but the file holds {body} "
                          "bytes after the header")
    return np.frombuffer(data, dtype="<u2", offset=TOKEN_HEADER_BYTES,
                         count=count)


def batches_per_epoch(count, batch, seq):
    """How many distinct batches a file of `count` tokens gives."""
    return (count - 1) // (batch * seq)


def get_batch(tokens, batch, seq, step):
    """The (inputs, targets) int64 arrays of shape [batch, seq] for `step`.

    nb = (count - 1) // (B*T); off = (step mod nb) * B*T; the B*T+1 tokens
    from off are cut into rows r = tokens[off + r*T : off + r*T + T], and the
    targets are the same rows shifted by one token.
    """
    nb = batches_per_epoch(len(tokens), batch, seq)
    if nb < 1:
        raise FormatError(
            f"token file holds {len(tokens)} tokens; batch {batch} x seq "
            f"{seq} needs at least {batch * seq + 1}")
    off = (step % nb) * batch * seq
    chunk = np.asarray(tokens[off:off + batch * seq + 1], dtype=np.int64)
    inputs = chunk[:-1].reshape(batch, seq)
    targets = chunk[1:].reshape(batch, seq)
    return inputs, targets


#===----------------------------------------------------------------------===#
# JSON step logs
#===----------------------------------------------------------------------===#

def read_step_log(path):
    """Returns {step: record} from a JSON-lines log.

    Keeps lines that are JSON objects with "step" and "loss"; other objects
    (e.g. {"summary": true, ...}) and blank lines are skipped. A line that is
    not JSON, or a step that appears twice, raises FormatError.
    """
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()
    except OSError as e:
        raise FormatError(f"cannot read log {path}: {e.strerror}")
    records = {}
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise FormatError(f"{path}:{number}: not a JSON line ({e})")
        if not isinstance(record, dict) or "step" not in record \
                or "loss" not in record:
            continue
        step = record["step"]
        if not isinstance(step, int):
            raise FormatError(f"{path}:{number}: step {step!r} is not an "
                              "integer")
        if step in records:
            raise FormatError(f"{path}:{number}: step {step} appears twice")
        records[step] = record
    return records
