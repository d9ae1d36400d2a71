//===- json.cpp - Minimal JSON value, parser and writer ---------*- C++ -*-===//
//
// A recursive-descent parser over a byte string. Recursion depth is bounded so
// a hostile header ("[[[[...") cannot overflow the stack.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/json.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace loom {

JsonValue JsonValue::boolean(bool v) {
  JsonValue j;
  j.k = Kind::Bool;
  j.b = v;
  return j;
}
JsonValue JsonValue::number(double v) {
  JsonValue j;
  j.k = Kind::Number;
  j.d = v;
  return j;
}
JsonValue JsonValue::integer(int64_t v) {
  JsonValue j;
  j.k = Kind::Number;
  j.exactInt = true;
  j.i = v;
  j.d = static_cast<double>(v);
  return j;
}
JsonValue JsonValue::string(std::string v) {
  JsonValue j;
  j.k = Kind::String;
  j.s = std::move(v);
  return j;
}
JsonValue JsonValue::array(std::vector<JsonValue> items) {
  JsonValue j;
  j.k = Kind::Array;
  j.arr = std::move(items);
  return j;
}
JsonValue JsonValue::object(std::vector<std::pair<std::string, JsonValue>> m) {
  JsonValue j;
  j.k = Kind::Object;
  j.obj = std::move(m);
  return j;
}

const JsonValue *JsonValue::find(const std::string &key) const {
  for (const auto &kv : obj)
    if (kv.first == key)
      return &kv.second;
  return nullptr;
}

//===----------------------------------------------------------------------===//
// Parser
//===----------------------------------------------------------------------===//

namespace {

constexpr int kMaxDepth = 256;

class Parser {
public:
  explicit Parser(const std::string &text) : t(text) {}

  Status parseDocument(JsonValue &out) {
    skipSpace();
    LOOM_RETURN_IF_ERROR(parseValue(out, 0));
    skipSpace();
    LOOM_CHECK(pos == t.size(), "JSON: unexpected '" << printable(t[pos])
                                                     << "' after the value at "
                                                     << "byte " << pos);
    return Status::success();
  }

private:
  const std::string &t;
  size_t pos = 0;

  static std::string printable(char c) {
    if (static_cast<unsigned char>(c) >= 0x20 && c != 0x7f)
      return std::string(1, c);
    char buf[8];
    std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
    return buf;
  }

  void skipSpace() {
    while (pos < t.size() && (t[pos] == ' ' || t[pos] == '\t' ||
                              t[pos] == '\n' || t[pos] == '\r'))
      ++pos;
  }

  Status expectLiteral(const char *lit) {
    size_t start = pos;
    for (const char *p = lit; *p; ++p, ++pos)
      LOOM_CHECK(pos < t.size() && t[pos] == *p,
                 "JSON: invalid literal at byte " << start << " (expected '"
                                                  << lit << "')");
    return Status::success();
  }

  Status parseValue(JsonValue &out, int depth) {
    LOOM_CHECK(depth <= kMaxDepth,
               "JSON: nesting deeper than " << kMaxDepth << " at byte " << pos);
    LOOM_CHECK(pos < t.size(), "JSON: unexpected end of input at byte " << pos);
    char c = t[pos];
    switch (c) {
    case '{':
      return parseObject(out, depth);
    case '[':
      return parseArray(out, depth);
    case '"': {
      std::string s;
      LOOM_RETURN_IF_ERROR(parseString(s));
      out = JsonValue::string(std::move(s));
      return Status::success();
    }
    case 't':
      LOOM_RETURN_IF_ERROR(expectLiteral("true"));
      out = JsonValue::boolean(true);
      return Status::success();
    case 'f':
      LOOM_RETURN_IF_ERROR(expectLiteral("false"));
      out = JsonValue::boolean(false);
      return Status::success();
    case 'n':
      LOOM_RETURN_IF_ERROR(expectLiteral("null"));
      out = JsonValue::null();
      return Status::success();
    default:
      if (c == '-' || (c >= '0' && c <= '9'))
        return parseNumber(out);
      LOOM_ERROR("JSON: unexpected '" << printable(c) << "' at byte " << pos);
    }
  }

  Status parseObject(JsonValue &out, int depth) {
    ++pos; // '{'
    out = JsonValue::object();
    std::set<std::string> seen;
    skipSpace();
    if (pos < t.size() && t[pos] == '}') {
      ++pos;
      return Status::success();
    }
    while (true) {
      skipSpace();
      LOOM_CHECK(pos < t.size() && t[pos] == '"',
                 "JSON: expected a string key at byte " << pos);
      size_t keyPos = pos;
      std::string key;
      LOOM_RETURN_IF_ERROR(parseString(key));
      LOOM_CHECK(seen.insert(key).second,
                 "JSON: duplicate key \"" << key << "\" at byte " << keyPos);
      skipSpace();
      LOOM_CHECK(pos < t.size() && t[pos] == ':',
                 "JSON: expected ':' after key at byte " << pos);
      ++pos;
      skipSpace();
      JsonValue v;
      LOOM_RETURN_IF_ERROR(parseValue(v, depth + 1));
      out.set(std::move(key), std::move(v));
      skipSpace();
      LOOM_CHECK(pos < t.size(),
                 "JSON: unterminated object at end of input (byte " << pos
                                                                    << ")");
      if (t[pos] == ',') {
        ++pos;
        continue;
      }
      LOOM_CHECK(t[pos] == '}', "JSON: expected ',' or '}' at byte " << pos);
      ++pos;
      return Status::success();
    }
  }

  Status parseArray(JsonValue &out, int depth) {
    ++pos; // '['
    out = JsonValue::array();
    skipSpace();
    if (pos < t.size() && t[pos] == ']') {
      ++pos;
      return Status::success();
    }
    while (true) {
      skipSpace();
      JsonValue v;
      LOOM_RETURN_IF_ERROR(parseValue(v, depth + 1));
      out.push(std::move(v));
      skipSpace();
      LOOM_CHECK(pos < t.size(),
                 "JSON: unterminated array at end of input (byte " << pos
                                                                   << ")");
      if (t[pos] == ',') {
        ++pos;
        continue;
      }
      LOOM_CHECK(t[pos] == ']', "JSON: expected ',' or ']' at byte " << pos);
      ++pos;
      return Status::success();
    }
  }

  Status parseHex4(uint32_t &cp) {
    LOOM_CHECK(pos + 4 <= t.size(),
               "JSON: truncated \\u escape at byte " << pos);
    cp = 0;
    for (int n = 0; n < 4; ++n) {
      char c = t[pos++];
      cp <<= 4;
      if (c >= '0' && c <= '9')
        cp |= c - '0';
      else if (c >= 'a' && c <= 'f')
        cp |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        cp |= c - 'A' + 10;
      else
        LOOM_ERROR("JSON: bad hex digit in \\u escape at byte " << pos - 1);
    }
    return Status::success();
  }

  static void appendUtf8(std::string &s, uint32_t cp) {
    if (cp < 0x80) {
      s += static_cast<char>(cp);
    } else if (cp < 0x800) {
      s += static_cast<char>(0xc0 | (cp >> 6));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else if (cp < 0x10000) {
      s += static_cast<char>(0xe0 | (cp >> 12));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
      s += static_cast<char>(0xf0 | (cp >> 18));
      s += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
      s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
      s += static_cast<char>(0x80 | (cp & 0x3f));
    }
  }

  Status parseString(std::string &out) {
    size_t start = pos;
    ++pos; // '"'
    out.clear();
    while (true) {
      LOOM_CHECK(pos < t.size(),
                 "JSON: unterminated string starting at byte " << start);
      char c = t[pos++];
      if (c == '"')
        return Status::success();
      LOOM_CHECK(static_cast<unsigned char>(c) >= 0x20,
                 "JSON: control character in string at byte " << pos - 1);
      if (c != '\\') {
        out += c;
        continue;
      }
      LOOM_CHECK(pos < t.size(),
                 "JSON: unterminated escape at byte " << pos - 1);
      char e = t[pos++];
      switch (e) {
      case '"':
      case '\\':
      case '/':
        out += e;
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u': {
        uint32_t cp;
        LOOM_RETURN_IF_ERROR(parseHex4(cp));
        if (cp >= 0xd800 && cp < 0xdc00) {
          // A high surrogate must be followed by an escaped low surrogate.
          LOOM_CHECK(pos + 2 <= t.size() && t[pos] == '\\' && t[pos + 1] == 'u',
                     "JSON: unpaired surrogate at byte " << pos);
          pos += 2;
          uint32_t lo;
          LOOM_RETURN_IF_ERROR(parseHex4(lo));
          LOOM_CHECK(lo >= 0xdc00 && lo < 0xe000,
                     "JSON: invalid low surrogate at byte " << pos - 4);
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else {
          LOOM_CHECK(!(cp >= 0xdc00 && cp < 0xe000),
                     "JSON: unpaired low surrogate at byte " << pos - 4);
        }
        appendUtf8(out, cp);
        break;
      }
      default:
        LOOM_ERROR("JSON: invalid escape '\\" << printable(e) << "' at byte "
                                              << pos - 2);
      }
    }
  }

  Status parseNumber(JsonValue &out) {
    size_t start = pos;
    bool integral = true;
    if (t[pos] == '-')
      ++pos;
    LOOM_CHECK(pos < t.size() && t[pos] >= '0' && t[pos] <= '9',
               "JSON: expected a digit at byte " << pos);
    if (t[pos] == '0') {
      ++pos;
    } else {
      while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9')
        ++pos;
    }
    if (pos < t.size() && t[pos] == '.') {
      integral = false;
      ++pos;
      LOOM_CHECK(pos < t.size() && t[pos] >= '0' && t[pos] <= '9',
                 "JSON: expected a digit after '.' at byte " << pos);
      while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9')
        ++pos;
    }
    if (pos < t.size() && (t[pos] == 'e' || t[pos] == 'E')) {
      integral = false;
      ++pos;
      if (pos < t.size() && (t[pos] == '+' || t[pos] == '-'))
        ++pos;
      LOOM_CHECK(pos < t.size() && t[pos] >= '0' && t[pos] <= '9',
                 "JSON: expected an exponent digit at byte " << pos);
      while (pos < t.size() && t[pos] >= '0' && t[pos] <= '9')
        ++pos;
    }
    std::string text = t.substr(start, pos - start);
    if (integral) {
      errno = 0;
      long long v = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == 0) {
        out = JsonValue::integer(static_cast<int64_t>(v));
        return Status::success();
      }
      // Out of int64 range: fall through and keep it as a double.
    }
    out = JsonValue::number(std::strtod(text.c_str(), nullptr));
    return Status::success();
  }
};

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

void writeString(std::string &o, const std::string &s) {
  o += '"';
  for (char c : s) {
    switch (c) {
    case '"':
      o += "\\\"";
      break;
    case '\\':
      o += "\\\\";
      break;
    case '\n':
      o += "\\n";
      break;
    case '\r':
      o += "\\r";
      break;
    case '\t':
      o += "\\t";
      break;
    case '\b':
      o += "\\b";
      break;
    case '\f':
      o += "\\f";
      break;
    default:
      if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        o += buf;
      } else {
        o += c;
      }
    }
  }
  o += '"';
}

void writeValue(std::string &o, const JsonValue &v) {
  switch (v.kind()) {
  case JsonValue::Kind::Null:
    o += "null";
    return;
  case JsonValue::Kind::Bool:
    o += v.asBool() ? "true" : "false";
    return;
  case JsonValue::Kind::Number: {
    if (v.isInteger()) {
      o += std::to_string(v.asInt());
      return;
    }
    // JSON has no NaN/Inf; null is what Python's json emits with allow_nan
    // off, and a reader then sees a clear type error rather than bad syntax.
    if (!std::isfinite(v.asDouble())) {
      o += "null";
      return;
    }
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%.17g", v.asDouble());
    o += buf;
    return;
  }
  case JsonValue::Kind::String:
    writeString(o, v.asString());
    return;
  case JsonValue::Kind::Array: {
    o += '[';
    bool first = true;
    for (const auto &item : v.items()) {
      if (!first)
        o += ',';
      first = false;
      writeValue(o, item);
    }
    o += ']';
    return;
  }
  case JsonValue::Kind::Object: {
    o += '{';
    bool first = true;
    for (const auto &kv : v.members()) {
      if (!first)
        o += ',';
      first = false;
      writeString(o, kv.first);
      o += ':';
      writeValue(o, kv.second);
    }
    o += '}';
    return;
  }
  }
}

} // namespace

Status parseJson(const std::string &text, JsonValue &out) {
  Parser p(text);
  return p.parseDocument(out);
}

std::string writeJson(const JsonValue &value) {
  std::string o;
  writeValue(o, value);
  return o;
}

} // namespace loom
