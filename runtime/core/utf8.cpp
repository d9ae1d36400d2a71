//===- utf8.cpp - UTF-8 decoding and repair -------------------------------===//
#include "runtime/core/utf8.h"

#include <cstdio>

namespace loom {

namespace {

/// The well-formed sequence at bytes[at, size): returns its length (1..4) and
/// sets `cp`; or returns 0 and sets `subpart` to the length (>= 1) of the
/// maximal subpart of an ill-formed one (the bytes a replacement covers).
size_t sequenceAt(const std::string &bytes, size_t at, char32_t &cp,
                  size_t &subpart) {
  const unsigned lead = static_cast<unsigned char>(bytes[at]);
  if (lead < 0x80) {
    cp = lead;
    return 1;
  }
  size_t length = 0;
  unsigned low = 0x80, high = 0xBF; // the second byte's range (Table 3-7)
  char32_t value = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
    value = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    length = 3;
    value = lead & 0x0F;
    low = lead == 0xE0 ? 0xA0 : 0x80;  // no overlong forms
    high = lead == 0xED ? 0x9F : 0xBF; // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    length = 4;
    value = lead & 0x07;
    low = lead == 0xF0 ? 0x90 : 0x80;  // no overlong forms
    high = lead == 0xF4 ? 0x8F : 0xBF; // nothing above U+10FFFF
  } else {
    subpart = 1; // a continuation byte or a lead byte that never occurs
    return 0;
  }
  for (size_t i = 1; i < length; ++i) {
    const unsigned b =
        at + i < bytes.size() ? static_cast<unsigned char>(bytes[at + i]) : 0;
    if (at + i >= bytes.size() || b < low || b > high) {
      subpart = i;
      return 0;
    }
    low = 0x80;
    high = 0xBF;
    value = (value << 6) | (b & 0x3F);
  }
  cp = value;
  return length;
}

} // namespace

Status decodeUtf8(const std::string &text, std::u32string &codePoints) {
  codePoints.clear();
  for (size_t at = 0; at < text.size();) {
    char32_t cp = 0;
    size_t subpart = 0;
    const size_t length = sequenceAt(text, at, cp, subpart);
    if (length == 0) {
      char hex[8];
      std::snprintf(
          hex, sizeof(hex), "0x%02X",
          static_cast<unsigned>(static_cast<unsigned char>(text[at])));
      const bool cut = at + subpart >= text.size() &&
                       static_cast<unsigned char>(text[at]) >= 0xC2;
      LOOM_ERROR("byte " << at << " (" << hex
                         << ") does not start a well-formed UTF-8 character"
                         << (cut ? " (the text ends inside it)" : "")
                         << "; pass the text as UTF-8");
    }
    codePoints.push_back(cp);
    at += length;
  }
  return Status::success();
}

void appendUtf8(char32_t cp, std::string &out) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string replaceIllFormedUtf8(const std::string &bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t at = 0; at < bytes.size();) {
    char32_t cp = 0;
    size_t subpart = 0;
    const size_t length = sequenceAt(bytes, at, cp, subpart);
    if (length == 0) {
      appendUtf8(0xFFFD, out);
      at += subpart;
    } else {
      out.append(bytes, at, length);
      at += length;
    }
  }
  return out;
}

} // namespace loom
