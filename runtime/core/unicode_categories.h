//===- unicode_categories.h - GPT-2 pattern classes -------------*- C++ -*-===//
//
// The three classes GPT-2's pre-tokenization pattern tests (tiktoken's gpt2
// encoding, bpe_tokenizer.h): \p{L}, \p{N} and \s, as the Rust regex crate
// tiktoken uses defines them. Letters and numbers come from a table generated
// from Unicode's general categories (scripts/generate-unicode-tables), so the
// runtime needs no ICU.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_UNICODE_CATEGORIES_H
#define LOOM_RUNTIME_CORE_UNICODE_CATEGORIES_H

namespace loom {

/// \p{L}: General_Category Lu, Ll, Lt, Lm or Lo.
bool isUnicodeLetter(char32_t cp);

/// \p{N}: General_Category Nd, Nl or No.
bool isUnicodeNumber(char32_t cp);

/// \s: the White_Space property (tab through carriage return, space, U+0085,
/// U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000).
bool isUnicodeWhiteSpace(char32_t cp);

/// The Unicode version the letter and number tables were generated from.
const char *unicodeTablesVersion();

} // namespace loom

#endif // LOOM_RUNTIME_CORE_UNICODE_CATEGORIES_H
