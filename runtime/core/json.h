//===- json.h - Minimal JSON value, parser and writer -----------*- C++ -*-===//
//
// The runtime must not link LLVM (whose llvm::json would otherwise be the
// obvious choice), and it reads untrusted headers (safetensors, configs), so
// this is a small strict parser: RFC 8259 syntax, a nesting limit, integers
// kept exact in int64 when they have no fraction or exponent, and errors that
// give the byte offset instead of crashing.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_JSON_H
#define LOOM_RUNTIME_CORE_JSON_H

#include "runtime/core/status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace loom {

/// A JSON value. Objects keep their keys in document order.
class JsonValue {
public:
  enum class Kind { Null, Bool, Number, String, Array, Object };

  JsonValue() = default;
  static JsonValue null() { return JsonValue(); }
  static JsonValue boolean(bool b);
  static JsonValue number(double d);
  static JsonValue integer(int64_t i);
  static JsonValue string(std::string s);
  static JsonValue array(std::vector<JsonValue> items = {});
  static JsonValue
  object(std::vector<std::pair<std::string, JsonValue>> m = {});

  Kind kind() const { return k; }
  bool isNull() const { return k == Kind::Null; }
  bool isBool() const { return k == Kind::Bool; }
  bool isNumber() const { return k == Kind::Number; }
  bool isString() const { return k == Kind::String; }
  bool isArray() const { return k == Kind::Array; }
  bool isObject() const { return k == Kind::Object; }
  /// True for a number written without fraction or exponent that fits int64.
  bool isInteger() const { return k == Kind::Number && exactInt; }

  bool asBool() const { return b; }
  double asDouble() const { return d; }
  int64_t asInt() const { return i; }
  const std::string &asString() const { return s; }
  const std::vector<JsonValue> &items() const { return arr; }
  const std::vector<std::pair<std::string, JsonValue>> &members() const {
    return obj;
  }

  /// The member named `key` of an object, or nullptr.
  const JsonValue *find(const std::string &key) const;

  /// Appends to an array.
  void push(JsonValue v) { arr.push_back(std::move(v)); }
  /// Appends a member to an object (no duplicate check).
  void set(std::string key, JsonValue v) {
    obj.emplace_back(std::move(key), std::move(v));
  }

private:
  Kind k = Kind::Null;
  bool b = false;
  bool exactInt = false;
  double d = 0;
  int64_t i = 0;
  std::string s;
  std::vector<JsonValue> arr;
  std::vector<std::pair<std::string, JsonValue>> obj;
};

/// Parses `text` as one JSON document. Errors (with byte offset) on syntax
/// errors, trailing garbage, duplicate object keys, invalid escapes or
/// nesting deeper than 256.
Status parseJson(const std::string &text, JsonValue &out);

/// Serializes compactly (no whitespace), escaping strings per RFC 8259.
std::string writeJson(const JsonValue &value);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_JSON_H
