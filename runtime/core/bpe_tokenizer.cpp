//===- bpe_tokenizer.cpp - GPT-2 byte-pair encoding -----------------------===//
//
// The pattern is matched by hand rather than with std::regex, which has no
// Unicode classes; each alternative is greedy with no lookbehind, so the
// first alternative that matches at a position gives the piece, and the only
// backtracking (\s+(?!\S)) is one code point.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/bpe_tokenizer.h"

#include "runtime/core/unicode_categories.h"
#include "runtime/core/utf8.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>

namespace loom {

namespace {

constexpr int32_t kTokenizerMagic = 20240328;
constexpr int kHeaderInts = 256;
/// llm.c's version 1 files are GPT-2's, whose last token ends a text.
constexpr int64_t kGpt2Vocab = 50257;

bool isOther(char32_t c) {
  return !isUnicodeWhiteSpace(c) && !isUnicodeLetter(c) && !isUnicodeNumber(c);
}

/// Where the pattern's match starting at t[i] ends (i < t.size()).
size_t matchEnd(const std::u32string &t, size_t i) {
  const size_t n = t.size();
  const char32_t c = t[i];
  // 's|'t|'re|'ve|'m|'ll|'d (case-sensitive, ASCII apostrophe only)
  if (c == U'\'' && i + 1 < n) {
    const char32_t d = t[i + 1];
    if (d == U's' || d == U't' || d == U'm' || d == U'd')
      return i + 2;
    if (i + 2 < n) {
      const char32_t e = t[i + 2];
      if ((d == U'r' && e == U'e') || (d == U'v' && e == U'e') ||
          (d == U'l' && e == U'l'))
        return i + 3;
    }
  }
  // ` ?\p{L}+`, then ` ?\p{N}+`, then ` ?[^\s\p{L}\p{N}]+`: the optional
  // space is taken when the class follows it.
  for (bool (*inClass)(char32_t) :
       {isUnicodeLetter, isUnicodeNumber, isOther}) {
    size_t from = n;
    if (c == U' ' && i + 1 < n && inClass(t[i + 1]))
      from = i + 1;
    else if (inClass(c))
      from = i;
    if (from == n)
      continue;
    size_t j = from;
    while (j < n && inClass(t[j]))
      ++j;
    return j;
  }
  // c is white space. `\s+(?!\S)`: the run, less its last character when a
  // non-space follows (so a space stays to lead the next word); a run of
  // one before a non-space is `\s+`'s.
  size_t j = i;
  while (j < n && isUnicodeWhiteSpace(t[j]))
    ++j;
  if (j < n && j - 1 > i)
    return j - 1;
  return j;
}

std::string hexByte(unsigned char b) {
  char hex[8];
  std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(b));
  return hex;
}

} // namespace

std::vector<std::string> splitGpt2Pieces(const std::u32string &text) {
  std::vector<std::string> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t j = matchEnd(text, i);
    std::string piece;
    for (size_t k = i; k < j; ++k)
      appendUtf8(text[k], piece);
    pieces.push_back(std::move(piece));
    i = j;
  }
  return pieces;
}

Status BpeTokenizer::load(const std::string &path, BpeTokenizer &out) {
  out = BpeTokenizer();
  out.file = path;
  std::ifstream in(path, std::ios::binary);
  LOOM_CHECK(in, "cannot open tokenizer file '"
                     << path
                     << "' (an llm.c tokenizer file such as "
                        "gpt2_tokenizer.bin, or one scripts/tokenize "
                        "--bpe-vocab wrote)");
  const std::string data((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  const std::string where = "tokenizer file '" + path + "'";
  LOOM_CHECK(data.size() >= kHeaderInts * 4,
             where << " is " << data.size()
                   << " bytes, shorter than its 1024-byte header");
  auto header = [&](int k) {
    uint32_t v = 0;
    for (int b = 3; b >= 0; --b)
      v = (v << 8) | static_cast<unsigned char>(data[4 * k + b]);
    return static_cast<int32_t>(v);
  };
  LOOM_CHECK(header(0) == kTokenizerMagic,
             where << " starts with magic " << header(0) << ", not "
                   << kTokenizerMagic
                   << " (llm.c's tokenizer files; a token file's magic is "
                      "20240520: pass it as --data, not --tokenizer)");
  const int32_t version = header(1);
  LOOM_CHECK(version == 1 || version == 2,
             where << " has version " << version
                   << "; llm.c's tokenizer files are version 1 or 2");
  const int64_t vocab = header(2);
  LOOM_CHECK(vocab >= 1 && vocab <= std::numeric_limits<int32_t>::max(),
             where << " says it holds " << vocab << " tokens (header[2])");
  if (version == 2) {
    out.eot = header(3);
    LOOM_CHECK(out.eot >= 0 && out.eot < vocab,
               where << " names token " << out.eot
                     << " as end-of-text (header[3]), outside its " << vocab
                     << " tokens");
  } else {
    out.eot = vocab == kGpt2Vocab ? static_cast<int32_t>(kGpt2Vocab - 1) : -1;
  }
  size_t at = kHeaderInts * 4;
  out.tokens.reserve(static_cast<size_t>(vocab));
  for (int64_t id = 0; id < vocab; ++id) {
    LOOM_CHECK(at < data.size(), where << " ends after " << id << " of its "
                                       << vocab << " tokens (truncated?)");
    const size_t length = static_cast<unsigned char>(data[at]);
    LOOM_CHECK(length >= 1, where << ": token " << id << " (at byte " << at
                                  << ") has length 0");
    LOOM_CHECK(at + 1 + length <= data.size(),
               where << ": token " << id << " (at byte " << at << ") needs "
                     << length << " bytes but the file ends "
                     << "after " << data.size() - at - 1 << " (truncated?)");
    out.tokens.emplace_back(data, at + 1, length);
    at += 1 + length;
  }
  LOOM_CHECK(at == data.size(), where << " has " << data.size() - at
                                      << " bytes after its " << vocab
                                      << " tokens (header[2] may be wrong)");
  for (int64_t id = 0; id < vocab; ++id) {
    if (id == out.eot)
      continue;
    auto [it, added] =
        out.idOfBytes.emplace(out.tokens[id], static_cast<int32_t>(id));
    LOOM_CHECK(added, where << ": tokens " << it->second << " and " << id
                            << " have the same bytes, so text has no single "
                               "encoding; a BPE table spells each token "
                               "once");
  }
  return Status::success();
}

Status BpeTokenizer::encodePiece(const std::string &piece,
                                 std::vector<int32_t> &ids) const {
  if (auto it = idOfBytes.find(piece); it != idOfBytes.end()) {
    ids.push_back(it->second); // tiktoken's shortcut: a piece that is a token
    return Status::success();
  }
  // start[k] is where part k begins; the last entry is the piece's end.
  std::vector<size_t> start(piece.size() + 1);
  for (size_t i = 0; i <= piece.size(); ++i)
    start[i] = i;
  std::string pair;
  while (start.size() > 2) {
    int32_t bestRank = std::numeric_limits<int32_t>::max();
    size_t best = 0;
    for (size_t k = 0; k + 2 < start.size(); ++k) {
      pair.assign(piece, start[k], start[k + 2] - start[k]);
      if (auto it = idOfBytes.find(pair);
          it != idOfBytes.end() && it->second < bestRank) {
        bestRank = it->second;
        best = k;
      }
    }
    if (bestRank == std::numeric_limits<int32_t>::max())
      break;
    start.erase(start.begin() + static_cast<std::ptrdiff_t>(best + 1));
  }
  for (size_t k = 0; k + 1 < start.size(); ++k) {
    const std::string part = piece.substr(start[k], start[k + 1] - start[k]);
    auto it = idOfBytes.find(part);
    // Unmerged parts are single bytes; merged ones are tokens by construction.
    LOOM_CHECK(it != idOfBytes.end(),
               "tokenizer file '"
                   << file << "' has no token for byte "
                   << hexByte(static_cast<unsigned char>(part[0]))
                   << ", so it cannot encode this text (a byte-level BPE "
                      "table holds all 256 bytes; write the prompt "
                      "without that character)");
    ids.push_back(it->second);
  }
  return Status::success();
}

Status BpeTokenizer::encode(const std::string &text,
                            std::vector<int32_t> &ids) const {
  ids.clear();
  std::u32string codePoints;
  LOOM_RETURN_IF_ERROR(decodeUtf8(text, codePoints));
  for (const std::string &piece : splitGpt2Pieces(codePoints))
    LOOM_RETURN_IF_ERROR(encodePiece(piece, ids));
  return Status::success();
}

Status BpeTokenizer::decode(const std::vector<int32_t> &ids,
                            std::string &bytes) const {
  bytes.clear();
  for (size_t i = 0; i < ids.size(); ++i) {
    LOOM_CHECK(ids[i] >= 0 && ids[i] < vocabSize(),
               "token " << i << " is " << ids[i] << ", outside tokenizer '"
                        << file << "''s " << vocabSize() << " tokens");
    bytes += tokens[ids[i]];
  }
  return Status::success();
}

} // namespace loom
