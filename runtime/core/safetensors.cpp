//===- safetensors.cpp - safetensors checkpoint I/O -------------*- C++ -*-===//
//
// Reading: whole file into memory, header parsed with the runtime's JSON
// parser, then every tensor entry validated before any data is copied.
// Writing: sorted by name, contiguous offsets, temp file + rename so a crash
// mid-write never leaves a half checkpoint under the real name.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/safetensors.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/json.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <unistd.h>

namespace loom {

//===----------------------------------------------------------------------===//
// DTypes and conversions
//===----------------------------------------------------------------------===//

namespace {

struct DTypeInfo {
  DType dtype;
  const char *name;
  int64_t size;
};

constexpr DTypeInfo kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4}, {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I64, "I64", 8}, {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},   {DType::I8, "I8", 1},   {DType::U8, "U8", 1},
    {DType::Bool, "BOOL", 1}};

/// The Python library refuses headers above 100 MB; so do we, so a garbage
/// length cannot make us allocate gigabytes.
constexpr uint64_t kMaxHeaderBytes = 100u * 1000u * 1000u;

} // namespace

const char *dtypeName(DType dtype) {
  for (const auto &d : kDTypes)
    if (d.dtype == dtype)
      return d.name;
  return "?";
}

int64_t dtypeSize(DType dtype) {
  for (const auto &d : kDTypes)
    if (d.dtype == dtype)
      return d.size;
  return 0;
}

bool parseDType(const std::string &name, DType &out) {
  for (const auto &d : kDTypes)
    if (name == d.name) {
      out = d.dtype;
      return true;
    }
  return false;
}

float f16ToFloat(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else { // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) |
             ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

//===----------------------------------------------------------------------===//
// SafeTensor / SafetensorsFile
//===----------------------------------------------------------------------===//

int64_t SafeTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

const SafeTensor *SafetensorsFile::find(const std::string &name) const {
  for (const auto &t : tensors)
    if (t.name == name)
      return &t;
  return nullptr;
}

void SafetensorsFile::addF32(const std::string &name,
                             const std::vector<int64_t> &shape,
                             const float *values) {
  SafeTensor t;
  t.name = name;
  t.dtype = DType::F32;
  t.shape = shape;
  size_t bytes = static_cast<size_t>(t.numel()) * sizeof(float);
  t.data.resize(bytes);
  if (bytes)
    std::memcpy(t.data.data(), values, bytes);
  tensors.push_back(std::move(t));
}

Status toFloat32(const SafeTensor &t, std::vector<float> &out) {
  const int64_t n = t.numel();
  LOOM_CHECK(static_cast<int64_t>(t.data.size()) == n * dtypeSize(t.dtype),
             "tensor '" << t.name << "': " << t.data.size()
                        << " bytes do not match its shape and dtype");
  out.resize(static_cast<size_t>(n));
  const uint8_t *p = t.data.data();
  switch (t.dtype) {
  case DType::F32:
    if (n)
      std::memcpy(out.data(), p, static_cast<size_t>(n) * 4);
    return Status::success();
  case DType::F64:
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, p + 8 * i, 8);
      out[i] = static_cast<float>(d);
    }
    return Status::success();
  case DType::BF16:
  case DType::F16:
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = t.dtype == DType::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
    }
    return Status::success();
  default:
    LOOM_ERROR("tensor '" << t.name << "' has dtype " << dtypeName(t.dtype)
                          << ", which is not a floating-point type; expected "
                             "F32, F16, BF16 or F64");
  }
}

Status toInt64(const SafeTensor &t, std::vector<int64_t> &out) {
  const int64_t n = t.numel();
  LOOM_CHECK(static_cast<int64_t>(t.data.size()) == n * dtypeSize(t.dtype),
             "tensor '" << t.name << "': " << t.data.size()
                        << " bytes do not match its shape and dtype");
  out.resize(static_cast<size_t>(n));
  const uint8_t *p = t.data.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype) {
    case DType::I64:
      std::memcpy(&out[i], p + 8 * i, 8);
      break;
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p + 4 * i, 4);
      out[i] = v;
      break;
    }
    case DType::I16: {
      int16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
      break;
    }
    case DType::I8:
      out[i] = static_cast<int8_t>(p[i]);
      break;
    case DType::U8:
    case DType::Bool:
      out[i] = p[i];
      break;
    default:
      LOOM_ERROR("tensor '" << t.name << "' has dtype " << dtypeName(t.dtype)
                            << ", which is not an integer type");
    }
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

namespace {

/// A validated header entry, before its bytes are copied.
struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

Status parseEntry(const std::string &src, const std::string &name,
                  const JsonValue &v, uint64_t bufferBytes, Entry &e) {
  const std::string where = "safetensors '" + src + "', tensor '" + name + "'";
  LOOM_CHECK(v.isObject(), where << ": header entry is not a JSON object");
  const JsonValue *dtype = v.find("dtype");
  const JsonValue *shape = v.find("shape");
  const JsonValue *offsets = v.find("data_offsets");
  LOOM_CHECK(dtype && dtype->isString(),
             where << ": missing or non-string \"dtype\"");
  LOOM_CHECK(parseDType(dtype->asString(), e.dtype),
             where << ": unknown dtype \"" << dtype->asString()
                   << "\"; supported: F64, F32, F16, BF16, I64, I32, I16, I8, "
                      "U8, BOOL");
  LOOM_CHECK(shape && shape->isArray(),
             where << ": missing or non-array \"shape\"");
  LOOM_CHECK(offsets && offsets->isArray() && offsets->items().size() == 2,
             where << ": \"data_offsets\" must be an array [begin, end]");
  e.name = name;
  // numel * size must not overflow; bound by the buffer as we go.
  uint64_t bytes = static_cast<uint64_t>(dtypeSize(e.dtype));
  for (const auto &d : shape->items()) {
    LOOM_CHECK(d.isInteger() && d.asInt() >= 0,
               where << ": shape entries must be non-negative integers");
    e.shape.push_back(d.asInt());
    uint64_t dim = static_cast<uint64_t>(d.asInt());
    if (dim != 0 && bytes > std::numeric_limits<uint64_t>::max() / dim)
      LOOM_ERROR(where << ": shape is too large (byte count overflows)");
    bytes *= dim;
  }
  for (const auto &o : offsets->items())
    LOOM_CHECK(o.isInteger() && o.asInt() >= 0,
               where << ": data_offsets must be non-negative integers");
  e.begin = static_cast<uint64_t>(offsets->items()[0].asInt());
  e.end = static_cast<uint64_t>(offsets->items()[1].asInt());
  LOOM_CHECK(e.begin <= e.end, where << ": data_offsets [" << e.begin << ", "
                                     << e.end << "] are reversed");
  LOOM_CHECK(e.end <= bufferBytes,
             where << ": data_offsets [" << e.begin << ", " << e.end
                   << "] lie beyond the data buffer (" << bufferBytes
                   << " bytes); the file is truncated or corrupt");
  LOOM_CHECK(e.end - e.begin == bytes,
             where << ": data_offsets span " << e.end - e.begin
                   << " bytes, but shape x " << dtypeName(e.dtype) << " needs "
                   << bytes);
  return Status::success();
}

/// Step 1: the header length, from the first min(8, fileBytes) bytes of a
/// file of `fileBytes` bytes.
Status headerLength(const uint8_t *first, uint64_t fileBytes,
                    const std::string &src, uint64_t &n) {
  LOOM_CHECK(fileBytes >= 8, "safetensors '"
                                 << src << "' is " << fileBytes
                                 << " bytes, too short for the 8-byte "
                                    "header length; the file is truncated");
  n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | first[i];
  LOOM_CHECK(n <= kMaxHeaderBytes,
             "safetensors '" << src << "': header length " << n
                             << " exceeds the 100 MB limit; the file is "
                                "corrupt or not safetensors");
  LOOM_CHECK(n <= fileBytes - 8,
             "safetensors '" << src << "': header length " << n
                             << " runs beyond the end of the file ("
                             << fileBytes << " bytes); the file is truncated");
  return Status::success();
}

/// Steps 2-4: the JSON header's entries (checked against a data buffer of
/// `bufferBytes`) and metadata.
Status parseHeader(const std::string &headerText, uint64_t bufferBytes,
                   const std::string &src, std::vector<Entry> &entries,
                   std::map<std::string, std::string> &metadata) {
  // 2. JSON header.
  JsonValue header;
  Status parsed = parseJson(headerText, header);
  if (!parsed.ok())
    return parsed.withContext("safetensors '" + src + "': malformed header");
  LOOM_CHECK(header.isObject(),
             "safetensors '" << src << "': header is not a JSON object");

  // 3. Entries.
  for (const auto &kv : header.members()) {
    if (kv.first == "__metadata__") {
      LOOM_CHECK(kv.second.isObject(),
                 "safetensors '" << src << "': __metadata__ is not an object");
      for (const auto &m : kv.second.members()) {
        LOOM_CHECK(m.second.isString(), "safetensors '"
                                            << src << "': metadata value for '"
                                            << m.first << "' is not a string");
        metadata[m.first] = m.second.asString();
      }
      continue;
    }
    Entry e;
    LOOM_RETURN_IF_ERROR(parseEntry(src, kv.first, kv.second, bufferBytes, e));
    entries.push_back(std::move(e));
  }

  // 4. No two tensors may share bytes.
  std::vector<const Entry *> byOffset;
  for (const auto &e : entries)
    byOffset.push_back(&e);
  std::sort(
      byOffset.begin(), byOffset.end(), [](const Entry *a, const Entry *b) {
        return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
      });
  for (size_t i = 1; i < byOffset.size(); ++i) {
    const Entry *a = byOffset[i - 1], *b = byOffset[i];
    // Zero-sized tensors occupy no bytes and cannot overlap anything.
    if (a->begin == a->end || b->begin == b->end)
      continue;
    LOOM_CHECK(b->begin >= a->end,
               "safetensors '" << src << "': tensors '" << a->name << "' ["
                               << a->begin << ", " << a->end << ") and '"
                               << b->name << "' [" << b->begin << ", " << b->end
                               << ") overlap; the file is corrupt");
  }
  return Status::success();
}

SafeTensor tensorOf(const Entry &e) {
  SafeTensor t;
  t.name = e.name;
  t.dtype = e.dtype;
  t.shape = e.shape;
  return t;
}

} // namespace

Status parseSafetensors(const std::vector<uint8_t> &bytes,
                        const std::string &src, SafetensorsFile &out) {
  out = SafetensorsFile();
  uint64_t n = 0;
  LOOM_RETURN_IF_ERROR(headerLength(bytes.data(), bytes.size(), src, n));
  std::vector<Entry> entries;
  LOOM_RETURN_IF_ERROR(
      parseHeader(std::string(reinterpret_cast<const char *>(bytes.data()) + 8,
                              static_cast<size_t>(n)),
                  bytes.size() - 8 - n, src, entries, out.metadata));
  // 5. Copy the data.
  const uint8_t *base = bytes.data() + 8 + n;
  for (const auto &e : entries) {
    SafeTensor t = tensorOf(e);
    t.data.assign(base + e.begin, base + e.end);
    out.tensors.push_back(std::move(t));
  }
  return Status::success();
}

Status readSafetensors(const std::string &path, SafetensorsFile &out) {
  out = SafetensorsFile();
  std::FILE *f = std::fopen(path.c_str(), "rb");
  LOOM_CHECK(f, "cannot open safetensors file '"
                    << path << "': " << std::strerror(errno)
                    << "; check the checkpoint path");
  // The header first, then each tensor read straight into its own bytes:
  // no copy of the whole file (a GPT-2 checkpoint is hundreds of MB).
  struct Closer {
    std::FILE *f;
    ~Closer() { std::fclose(f); }
  } closer{f};
  const std::string unreadable = "cannot read safetensors file '" + path + "'";
  LOOM_CHECK(std::fseek(f, 0, SEEK_END) == 0, unreadable);
  const long size = std::ftell(f);
  LOOM_CHECK(size >= 0 && std::fseek(f, 0, SEEK_SET) == 0, unreadable);
  const uint64_t fileBytes = static_cast<uint64_t>(size);
  uint8_t first[8] = {};
  const size_t firstBytes =
      static_cast<size_t>(std::min<uint64_t>(8, fileBytes));
  LOOM_CHECK(std::fread(first, 1, firstBytes, f) == firstBytes, unreadable);
  uint64_t n = 0;
  LOOM_RETURN_IF_ERROR(headerLength(first, fileBytes, path, n));
  std::string headerText(static_cast<size_t>(n), '\0');
  LOOM_CHECK(std::fread(headerText.data(), 1, headerText.size(), f) ==
                 headerText.size(),
             unreadable);
  std::vector<Entry> entries;
  LOOM_RETURN_IF_ERROR(
      parseHeader(headerText, fileBytes - 8 - n, path, entries, out.metadata));
  for (const auto &e : entries) {
    SafeTensor t = tensorOf(e);
    t.data.resize(static_cast<size_t>(e.end - e.begin));
    LOOM_CHECK(
        std::fseek(f, static_cast<long>(8 + n + e.begin), SEEK_SET) == 0 &&
            std::fread(t.data.data(), 1, t.data.size(), f) == t.data.size(),
        unreadable << " (tensor '" << e.name << "')");
    out.tensors.push_back(std::move(t));
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

Status writeSafetensors(const std::string &path, const SafetensorsFile &file) {
  // 1. Sorted order and validation.
  std::vector<const SafeTensor *> sorted;
  for (const auto &t : file.tensors)
    sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const SafeTensor *a, const SafeTensor *b) {
              return a->name < b->name;
            });
  for (size_t i = 0; i < sorted.size(); ++i) {
    const SafeTensor &t = *sorted[i];
    LOOM_CHECK(i == 0 || sorted[i - 1]->name != t.name,
               "cannot write '" << path << "': tensor name '" << t.name
                                << "' appears twice");
    LOOM_CHECK(t.name != "__metadata__",
               "cannot write '" << path << "': '__metadata__' is reserved");
    for (int64_t d : t.shape)
      LOOM_CHECK(d >= 0, "cannot write '" << path << "': tensor '" << t.name
                                          << "' has a negative dimension");
    LOOM_CHECK(static_cast<int64_t>(t.data.size()) ==
                   t.numel() * dtypeSize(t.dtype),
               "cannot write '" << path << "': tensor '" << t.name << "' has "
                                << t.data.size() << " bytes, but its shape x "
                                << dtypeName(t.dtype) << " needs "
                                << t.numel() * dtypeSize(t.dtype));
  }

  // 2. Header JSON with contiguous offsets.
  JsonValue header = JsonValue::object();
  if (!file.metadata.empty()) {
    JsonValue meta = JsonValue::object();
    for (const auto &kv : file.metadata)
      meta.set(kv.first, JsonValue::string(kv.second));
    header.set("__metadata__", std::move(meta));
  }
  uint64_t offset = 0;
  for (const SafeTensor *t : sorted) {
    JsonValue shape = JsonValue::array();
    for (int64_t d : t->shape)
      shape.push(JsonValue::integer(d));
    JsonValue offsets = JsonValue::array();
    offsets.push(JsonValue::integer(static_cast<int64_t>(offset)));
    offset += t->data.size();
    offsets.push(JsonValue::integer(static_cast<int64_t>(offset)));
    JsonValue entry = JsonValue::object();
    entry.set("dtype", JsonValue::string(dtypeName(t->dtype)));
    entry.set("shape", std::move(shape));
    entry.set("data_offsets", std::move(offsets));
    header.set(t->name, std::move(entry));
  }
  std::string text = writeJson(header);
  // Pad so the data buffer starts 8-byte aligned, as the Python writer does.
  while ((text.size() + 8) % 8 != 0)
    text += ' ';
  uint8_t len[8];
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(n >> (8 * i));

  // 3. Temp file, then rename.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::FILE *f = std::fopen(tmp.c_str(), "wb");
  LOOM_CHECK(f, "cannot create '" << tmp << "': " << std::strerror(errno)
                                  << "; check that the checkpoint directory "
                                     "exists and is writable");
  bool ok = std::fwrite(len, 1, 8, f) == 8 &&
            std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const SafeTensor *t : sorted)
    ok = ok &&
         (t->data.empty() ||
          std::fwrite(t->data.data(), 1, t->data.size(), f) == t->data.size());
  ok = (std::fflush(f) == 0) && ok;
  ok = (::fsync(::fileno(f)) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    LOOM_ERROR("cannot write '" << tmp << "' (disk full?)");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    LOOM_ERROR("cannot rename '" << tmp << "' to '" << path
                                 << "': " << std::strerror(err));
  }
  return Status::success();
}

} // namespace loom
