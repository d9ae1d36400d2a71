"""GPT-2 byte-level BPE for scripts/tokenize: llm.c tokenizer files, tiktoken's
encoding, and learning a small vocabulary from a corpus. Stdlib only.

The tokenizer file is llm.c's (gpt2_tokenizer.bin; runtime/core/bpe_tokenizer.h
reads the same): a header of 256 little-endian int32 (magic 20240328, version
2, the number of tokens V, the end-of-text token), then each token's bytes as
a uint8 length and that many bytes.

Encoding is tiktoken's "gpt2" encoding, given the table: split the text with
GPT-2's pattern (split_pieces), then merge each piece's bytes pairwise, always
the adjacent pair whose concatenation is the token of lowest id (leftmost on
ties), until no adjacent pair is a token. Text never encodes to the
end-of-text token.
"""
import os
import struct
import unicodedata
from collections import Counter

TOKENIZER_MAGIC = 20240328
TOKENIZER_VERSION = 2
HEADER_INTS = 256
END_OF_TEXT = b"<|endoftext|>"
GPT2_VOCAB = 50257  # llm.c's version 1 files: GPT-2's, end-of-text 50256

# Unicode's White_Space property: the \s of the Rust regex tiktoken uses.
WHITE_SPACE = frozenset(
    [0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029,
     0x202F, 0x205F, 0x3000] + list(range(0x2000, 0x200B)))


class TokenizerError(Exception):
    """A tokenizer file that does not follow the format, or text it cannot
    encode."""


def _letter(ch):
    return unicodedata.category(ch)[0] == "L"


def _number(ch):
    return unicodedata.category(ch)[0] == "N"


def _space(ch):
    return ord(ch) in WHITE_SPACE


def _other(ch):
    return not (_space(ch) or _letter(ch) or _number(ch))


def split_pieces(text):
    """GPT-2's pre-tokenization: the matches of tiktoken's gpt2 pattern
    's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
    matched alternative by alternative (each is greedy, so the first that
    matches at a position is the piece)."""
    pieces, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        end = None
        if c == "'" and i + 1 < n:
            if text[i + 1] in "stmd":
                end = i + 2
            elif text[i + 1:i + 3] in ("re", "ve", "ll"):
                end = i + 3
        if end is None:
            for in_class in (_letter, _number, _other):
                if c == " " and i + 1 < n and in_class(text[i + 1]):
                    start = i + 1
                elif in_class(c):
                    start = i
                else:
                    continue
                end = start
                while end < n and in_class(text[end]):
                    end += 1
                break
        if end is None:  # white space: leave the last one to a word after it
            end = i
            while end < n and _space(text[end]):
                end += 1
            if end < n and end - 1 > i:
                end -= 1
        pieces.append(text[i:end])
        i = end
    return pieces


class Tokenizer:
    """A byte-level BPE table: tokens[id] is the token's bytes."""

    def __init__(self, tokens, eot):
        self.tokens = list(tokens)
        self.eot = eot
        self.rank = {}
        for i, t in enumerate(self.tokens):
            if i == eot:
                continue
            if t in self.rank:
                raise TokenizerError(
                    f"tokens {self.rank[t]} and {i} have the same bytes")
            self.rank[t] = i
        self._cache = {}

    def _encode_piece(self, piece):
        if piece in self.rank:
            return [self.rank[piece]]
        parts = [piece[i:i + 1] for i in range(len(piece))]
        while len(parts) > 1:
            best, at = None, -1
            for k in range(len(parts) - 1):
                r = self.rank.get(parts[k] + parts[k + 1])
                if r is not None and (best is None or r < best):
                    best, at = r, k
            if best is None:
                break
            parts[at:at + 2] = [parts[at] + parts[at + 1]]
        ids = []
        for p in parts:
            if p not in self.rank:
                raise TokenizerError(f"no token for byte 0x{p[0]:02X}")
            ids.append(self.rank[p])
        return ids

    def encode(self, text):
        """The ids of `text` (a str)."""
        ids = []
        for piece in split_pieces(text):
            cached = self._cache.get(piece)
            if cached is None:
                cached = self._encode_piece(piece.encode("utf-8"))
                self._cache[piece] = cached
            ids.extend(cached)
        return ids

    def decode(self, ids):
        """The text of `ids`, ill-formed UTF-8 replaced by U+FFFD (tiktoken's
        decode)."""
        return b"".join(self.tokens[i] for i in ids).decode(
            "utf-8", errors="replace")


def learn(text, vocab_size):
    """A BPE table of `vocab_size` tokens learned from `text`: the 256 bytes,
    then the most frequent adjacent pair within GPT-2's pieces merged, again
    and again (ties: the pair of lowest ids), then the end-of-text token.
    A merge that spells an existing token reuses it, so every token's bytes
    are unique. Stops early when no pair is left to merge."""
    if vocab_size < 257:
        raise TokenizerError(
            f"a byte-level BPE vocabulary holds the 256 bytes and the "
            f"end-of-text token, so --bpe-vocab must be >= 257, got "
            f"{vocab_size}")
    tokens = [bytes([b]) for b in range(256)]
    index = {t: i for i, t in enumerate(tokens)}
    words = Counter(tuple(p.encode("utf-8")) for p in split_pieces(text))
    while len(tokens) < vocab_size - 1:
        pairs = Counter()
        for word, count in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += count
        # A token is at most 255 bytes (its length is one byte in the file).
        candidates = [p for p in pairs
                      if len(tokens[p[0]]) + len(tokens[p[1]]) <= 255]
        if not candidates:
            break
        a, b = min(candidates, key=lambda p: (-pairs[p], p))
        merged = tokens[a] + tokens[b]
        new = index.get(merged)
        if new is None:
            new = len(tokens)
            tokens.append(merged)
            index[merged] = new
        merged_words = Counter()
        for word, count in words.items():
            out, i = [], 0
            while i < len(word):
                if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
                    out.append(new)
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged_words[tuple(out)] += count
        words = merged_words
    tokens.append(END_OF_TEXT)
    return Tokenizer(tokens, len(tokens) - 1)


def read_tokenizer(path):
    """Reads an llm.c tokenizer file; raises TokenizerError."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise TokenizerError(f"cannot read {path}: {e.strerror}")
    if len(data) < HEADER_INTS * 4:
        raise TokenizerError(f"{path}: {len(data)} bytes, shorter than the "
                             "1024-byte header")
    header = struct.unpack_from(f"<{HEADER_INTS}i", data, 0)
    if header[0] != TOKENIZER_MAGIC:
        raise TokenizerError(f"{path}: magic {header[0]}, not "
                             f"{TOKENIZER_MAGIC} (an llm.c tokenizer file)")
    if header[1] not in (1, 2):
        raise TokenizerError(f"{path}: version {header[1]}, not 1 or 2")
    vocab = header[2]
    if vocab < 1:
        raise TokenizerError(f"{path}: header says {vocab} tokens")
    eot = header[3] if header[1] == 2 else (
        GPT2_VOCAB - 1 if vocab == GPT2_VOCAB else -1)
    if header[1] == 2 and not 0 <= eot < vocab:
        raise TokenizerError(f"{path}: end-of-text token {eot} is outside "
                             f"its {vocab} tokens")
    tokens, at = [], HEADER_INTS * 4
    for i in range(vocab):
        if at >= len(data):
            raise TokenizerError(f"{path}: ends after {i} of {vocab} tokens")
        length = data[at]
        if length == 0 or at + 1 + length > len(data):
            raise TokenizerError(f"{path}: token {i} (at byte {at}) is "
                                 "empty or cut off")
        tokens.append(data[at + 1:at + 1 + length])
        at += 1 + length
    if at != len(data):
        raise TokenizerError(f"{path}: {len(data) - at} bytes after its "
                             f"{vocab} tokens")
    return Tokenizer(tokens, eot)


def write_tokenizer(path, tokenizer):
    """Writes `tokenizer` as a version 2 llm.c tokenizer file, atomically."""
    header = [0] * HEADER_INTS
    header[0], header[1] = TOKENIZER_MAGIC, TOKENIZER_VERSION
    header[2], header[3] = len(tokenizer.tokens), tokenizer.eot
    body = bytearray(struct.pack(f"<{HEADER_INTS}i", *header))
    for t in tokenizer.tokens:
        if not 1 <= len(t) <= 255:
            raise TokenizerError(f"token {t!r} is not 1..255 bytes long")
        body.append(len(t))
        body += t
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(body)
    os.replace(tmp, path)
