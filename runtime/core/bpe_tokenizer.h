//===- bpe_tokenizer.h - GPT-2 byte-pair encoding ---------------*- C++ -*-===//
//
// Text <-> token ids with the tokenizer a model's data was tokenized with,
// read from llm.c's tokenizer file (gpt2_tokenizer.bin, written by llm.c's
// train_gpt2.py): a header of 256 little-endian int32 (header[0] = magic
// 20240328, header[1] = version 1 or 2, header[2] = the number of tokens V,
// version 2: header[3] = the end-of-text token; version 1 is GPT-2's, whose
// end-of-text token is 50256), then for each id 0..V-1 its bytes as one
// uint8 length (>= 1) and that many bytes.
//
// Decoding concatenates the tokens' bytes. Encoding is tiktoken's for its
// "gpt2" encoding (what nanoGPT's prepare.py and llm.c's data scripts use):
// split the text with GPT-2's pattern (splitGpt2Pieces), then within each
// piece start from single bytes and repeatedly merge the adjacent pair whose
// concatenation is the token of lowest id (tiktoken's rank: a BPE table lists
// a merge after the tokens it joins), leftmost on ties, until no adjacent
// pair is a token. The end-of-text token is special: text never encodes to
// it (tiktoken's encode_ordinary).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_BPE_TOKENIZER_H
#define LOOM_RUNTIME_CORE_BPE_TOKENIZER_H

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace loom {

/// GPT-2's pre-tokenization of `text` (code points): the matches, in order,
/// of tiktoken's gpt2 pattern
///   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
/// as UTF-8 strings; they concatenate to the text.
std::vector<std::string> splitGpt2Pieces(const std::u32string &text);

/// A byte-level BPE vocabulary loaded from an llm.c tokenizer file.
class BpeTokenizer {
public:
  /// Reads and checks `path`: the header, every token's length (>= 1) and
  /// bytes, nothing after the last token, and no two tokens with the same
  /// bytes (encoding looks tokens up by their bytes). Errors name the file,
  /// the token and the byte offset.
  static Status load(const std::string &path, BpeTokenizer &out);

  int64_t vocabSize() const { return static_cast<int64_t>(tokens.size()); }
  /// The end-of-text token, or -1 when the file names none.
  int32_t endOfText() const { return eot; }
  const std::string &path() const { return file; }
  /// The bytes of token `id` (0 <= id < vocabSize()).
  const std::string &bytesOf(int32_t id) const { return tokens[id]; }

  /// The ids of UTF-8 `text` (see the file comment). Errors when the text is
  /// not UTF-8 or holds a byte that no token spells.
  Status encode(const std::string &text, std::vector<int32_t> &ids) const;

  /// The concatenated bytes of `ids`; an id outside [0, vocabSize()) is an
  /// error naming its position.
  Status decode(const std::vector<int32_t> &ids, std::string &bytes) const;

private:
  /// Appends the ids of one pre-tokenized piece.
  Status encodePiece(const std::string &piece, std::vector<int32_t> &ids) const;

  std::vector<std::string> tokens;
  /// Every token but the end-of-text one, by its bytes: its id is its rank.
  std::unordered_map<std::string, int32_t> idOfBytes;
  int32_t eot = -1;
  std::string file;
};

} // namespace loom

#endif // LOOM_RUNTIME_CORE_BPE_TOKENIZER_H
