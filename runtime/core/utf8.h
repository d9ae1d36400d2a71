//===- utf8.h - UTF-8 decoding and repair -----------------------*- C++ -*-===//
//
// Prompts are UTF-8 text to encode (strict: an ill-formed byte is an error
// that names its offset); sampled token bytes are arbitrary and are shown the
// way Python's bytes.decode("utf-8", errors="replace") shows them, which is
// what tiktoken's decode returns to nanoGPT's sample.py.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_UTF8_H
#define LOOM_RUNTIME_CORE_UTF8_H

#include "runtime/core/status.h"

#include <string>

namespace loom {

/// The code points of well-formed UTF-8 `text` (Unicode's Table 3-7: no
/// overlong forms, surrogates or values above U+10FFFF). The error names the
/// first ill-formed byte's offset and value.
Status decodeUtf8(const std::string &text, std::u32string &codePoints);

/// Appends the UTF-8 encoding of the scalar value `cp`.
void appendUtf8(char32_t cp, std::string &out);

/// `bytes` with every maximal ill-formed subpart replaced by U+FFFD (the
/// W3C / Python "replace" practice), so the result is well-formed UTF-8.
std::string replaceIllFormedUtf8(const std::string &bytes);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_UTF8_H
