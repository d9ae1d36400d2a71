//===- unicode_categories.cpp - Character classes of GPT-2's pattern ------===//
#include "runtime/core/unicode_categories.h"

#include <algorithm>
#include <cstdint>
#include <iterator>

namespace loom {

namespace {

struct CodePointRange {
  uint32_t first, last; // inclusive
};

#include "runtime/core/unicode_categories.inc"

template <size_t N>
bool inRanges(const CodePointRange (&table)[N], char32_t cp) {
  // The first range whose last code point is >= cp.
  const CodePointRange *it = std::lower_bound(
      std::begin(table), std::end(table), static_cast<uint32_t>(cp),
      [](const CodePointRange &r, uint32_t c) { return r.last < c; });
  return it != std::end(table) && it->first <= cp;
}

} // namespace

bool isUnicodeLetter(char32_t cp) {
  if (cp < 0x80)
    return (cp >= 'A' && cp <= 'Z') || (cp >= 'a' && cp <= 'z');
  return inRanges(kLetterRanges, cp);
}

bool isUnicodeNumber(char32_t cp) {
  if (cp < 0x80)
    return cp >= '0' && cp <= '9';
  return inRanges(kNumberRanges, cp);
}

bool isUnicodeWhiteSpace(char32_t cp) {
  switch (cp) {
  case 0x09:
  case 0x0A:
  case 0x0B:
  case 0x0C:
  case 0x0D:
  case 0x20:
  case 0x85:
  case 0xA0:
  case 0x1680:
  case 0x2028:
  case 0x2029:
  case 0x202F:
  case 0x205F:
  case 0x3000:
    return true;
  default:
    return cp >= 0x2000 && cp <= 0x200A;
  }
}

const char *unicodeTablesVersion() { return kTablesUnicodeVersion; }

} // namespace loom
