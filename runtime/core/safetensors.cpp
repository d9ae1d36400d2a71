//===- safetensors.cpp - safetensors checkpoint I/O -------------*- C++ -*-===//
//
// Reading: the header alone is read and parsed with the runtime's JSON
// parser, and every tensor entry validated before any data is read; the
// data is then read tensor by tensor (SafetensorsReader) or whole
// (readSafetensors, parseSafetensors).
// Writing: sorted by name, contiguous offsets, temp file + rename so a crash
// mid-write never leaves a half checkpoint under the real name; the data is
// written tensor by tensor (SafetensorsWriter), writeSafetensors on top.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/safetensors.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/json.h"
#include "runtime/core/tensor_box.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
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

namespace {
int64_t numelOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}
} // namespace

int64_t SafeTensor::numel() const { return numelOf(shape); }

int64_t TensorEntry::numel() const { return numelOf(shape); }

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

Status toFloat32(DType dtype, const uint8_t *p, int64_t n, float *out,
                 const std::string &name) {
  switch (dtype) {
  case DType::F32:
    if (n)
      std::memcpy(out, p, static_cast<size_t>(n) * 4);
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
      out[i] = dtype == DType::BF16 ? bf16ToFloat(h) : f16ToFloat(h);
    }
    return Status::success();
  default:
    LOOM_ERROR("tensor '" << name << "' has dtype " << dtypeName(dtype)
                          << ", which is not a floating-point type; expected "
                             "F32, F16, BF16 or F64");
  }
}

Status toFloat32(const SafeTensor &t, std::vector<float> &out) {
  const int64_t n = t.numel();
  LOOM_CHECK(static_cast<int64_t>(t.data.size()) == n * dtypeSize(t.dtype),
             "tensor '" << t.name << "': " << t.data.size()
                        << " bytes do not match its shape and dtype");
  out.resize(static_cast<size_t>(n));
  return toFloat32(t.dtype, t.data.data(), n, out.data(), t.name);
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

Status parseEntry(const std::string &src, const std::string &name,
                  const JsonValue &v, uint64_t bufferBytes, TensorEntry &e) {
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
                   const std::string &src, std::vector<TensorEntry> &entries,
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
    TensorEntry e;
    LOOM_RETURN_IF_ERROR(parseEntry(src, kv.first, kv.second, bufferBytes, e));
    entries.push_back(std::move(e));
  }

  // 4. No two tensors may share bytes.
  std::vector<const TensorEntry *> byOffset;
  for (const auto &e : entries)
    byOffset.push_back(&e);
  std::sort(byOffset.begin(), byOffset.end(),
            [](const TensorEntry *a, const TensorEntry *b) {
              return a->begin != b->begin ? a->begin < b->begin
                                          : a->end < b->end;
            });
  for (size_t i = 1; i < byOffset.size(); ++i) {
    const TensorEntry *a = byOffset[i - 1], *b = byOffset[i];
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

SafeTensor tensorOf(const TensorEntry &e) {
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
  std::vector<TensorEntry> entries;
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

SafetensorsReader::~SafetensorsReader() {
  if (fd >= 0)
    ::close(fd);
}

namespace {

/// Moves exactly `bytes` bytes between `data` and offset `offset` of `fd`
/// with `io` (::pread or ::pwrite), resuming after short transfers and
/// EINTR; false on an error or when the file ends first.
template <typename IO, typename Byte>
bool transferAll(IO io, int fd, Byte *data, uint64_t bytes, uint64_t offset) {
  while (bytes > 0) {
    const ssize_t moved =
        io(fd, data, static_cast<size_t>(std::min<uint64_t>(bytes, 1u << 30)),
           static_cast<off_t>(offset));
    if (moved < 0 && errno == EINTR)
      continue;
    if (moved <= 0)
      return false;
    data += moved;
    bytes -= static_cast<uint64_t>(moved);
    offset += static_cast<uint64_t>(moved);
  }
  return true;
}

bool preadAll(int fd, void *dst, uint64_t bytes, uint64_t offset) {
  return transferAll(::pread, fd, static_cast<uint8_t *>(dst), bytes, offset);
}

bool pwriteAll(int fd, const void *src, uint64_t bytes, uint64_t offset) {
  return transferAll(::pwrite, fd, static_cast<const uint8_t *>(src), bytes,
                     offset);
}

} // namespace

Status SafetensorsReader::open(const std::string &path) {
  if (fd >= 0)
    ::close(fd);
  tensorEntries.clear();
  byName.clear();
  meta.clear();
  filePath = path;
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LOOM_CHECK(fd >= 0, "cannot open safetensors file '"
                          << path << "': " << std::strerror(errno)
                          << "; check the checkpoint path");
  const std::string unreadable = "cannot read safetensors file '" + path + "'";
  const off_t size = ::lseek(fd, 0, SEEK_END);
  LOOM_CHECK(size >= 0, unreadable << ": " << std::strerror(errno));
  const uint64_t fileBytes = static_cast<uint64_t>(size);
  uint8_t first[8] = {};
  LOOM_CHECK(preadAll(fd, first, std::min<uint64_t>(8, fileBytes), 0),
             unreadable);
  uint64_t n = 0;
  LOOM_RETURN_IF_ERROR(headerLength(first, fileBytes, path, n));
  std::string headerText(static_cast<size_t>(n), '\0');
  LOOM_CHECK(preadAll(fd, headerText.data(), n, 8), unreadable);
  LOOM_RETURN_IF_ERROR(
      parseHeader(headerText, fileBytes - 8 - n, path, tensorEntries, meta));
  dataStart = 8 + n;
  for (size_t i = 0; i < tensorEntries.size(); ++i)
    byName[tensorEntries[i].name] = i;
  return Status::success();
}

const TensorEntry *SafetensorsReader::find(const std::string &name) const {
  auto it = byName.find(name);
  return it == byName.end() ? nullptr : &tensorEntries[it->second];
}

Status SafetensorsReader::read(const TensorEntry &entry, uint64_t offset,
                               uint64_t bytes, void *dst) const {
  LOOM_CHECK(fd >= 0, "safetensors reader: no file is open");
  LOOM_CHECK(offset <= entry.bytes() && bytes <= entry.bytes() - offset,
             "safetensors '" << filePath << "', tensor '" << entry.name
                             << "': bytes [" << offset << ", " << offset + bytes
                             << ") lie outside its " << entry.bytes()
                             << " bytes");
  LOOM_CHECK(preadAll(fd, dst, bytes, dataStart + entry.begin + offset),
             "cannot read safetensors file '"
                 << filePath << "' (tensor '" << entry.name
                 << "'): the file ends early; was it truncated or "
                    "overwritten while being read?");
  return Status::success();
}

Status SafetensorsReader::readFloat32Box(const TensorEntry &entry,
                                         const std::vector<int64_t> &global,
                                         const std::vector<int64_t> &offset,
                                         const std::vector<int64_t> &extent,
                                         float *out, std::vector<uint8_t> &raw,
                                         int64_t chunkElements) const {
  assert(chunkElements > 0 && global.size() == offset.size() &&
         global.size() == extent.size());
  const int64_t elementBytes = dtypeSize(entry.dtype);
  const int64_t stored = entry.numel();
  Status status = Status::success();
  // The pending read: `length` elements from flat index `from` into
  // out + `to`.
  int64_t from = 0, to = 0, length = 0;
  auto flush = [&]() {
    if (length == 0 || !status.ok())
      return;
    const int64_t real = std::clamp<int64_t>(stored - from, 0, length);
    if (real > 0) {
      raw.resize(static_cast<size_t>(real * elementBytes));
      status = read(entry, static_cast<uint64_t>(from * elementBytes),
                    raw.size(), raw.data());
      if (status.ok())
        status = toFloat32(entry.dtype, raw.data(), real, out + to, entry.name);
    }
    std::fill(out + to + real, out + to + length, 0.0f);
    length = 0;
  };
  forEachBoxRun(
      global, offset, extent, [&](int64_t at, int64_t box, int64_t n) {
        // A long row is read in pieces; adjacent rows together
        // (in the box they are adjacent too).
        for (int64_t done = 0; done < n;) {
          if (length == chunkElements ||
              (length > 0 && at + done != from + length))
            flush();
          if (length == 0) {
            from = at + done;
            to = box + done;
          }
          const int64_t take = std::min(n - done, chunkElements - length);
          length += take;
          done += take;
        }
      });
  flush();
  return status;
}

Status readSafetensors(const std::string &path, SafetensorsFile &out) {
  out = SafetensorsFile();
  SafetensorsReader reader;
  LOOM_RETURN_IF_ERROR(reader.open(path));
  out.metadata = reader.metadata();
  for (const TensorEntry &e : reader.entries()) {
    SafeTensor t = tensorOf(e);
    t.data.resize(static_cast<size_t>(e.bytes()));
    LOOM_RETURN_IF_ERROR(reader.read(e, 0, e.bytes(), t.data.data()));
    out.tensors.push_back(std::move(t));
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

SafetensorsWriter::~SafetensorsWriter() {
  if (fd < 0)
    return;
  ::close(fd);
  std::remove(tmpPath.c_str());
}

Status
SafetensorsWriter::create(const std::string &path,
                          std::vector<TensorEntry> tensors,
                          const std::map<std::string, std::string> &metadata) {
  LOOM_CHECK(fd < 0, "cannot write '" << path
                                      << "': this writer is still "
                                         "writing '"
                                      << finalPath << "'");
  // 1. Sorted order and validation.
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorEntry &a, const TensorEntry &b) {
              return a.name < b.name;
            });
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry &t = tensors[i];
    LOOM_CHECK(i == 0 || tensors[i - 1].name != t.name,
               "cannot write '" << path << "': tensor name '" << t.name
                                << "' appears twice");
    LOOM_CHECK(t.name != "__metadata__",
               "cannot write '" << path << "': '__metadata__' is reserved");
    for (int64_t d : t.shape)
      LOOM_CHECK(d >= 0, "cannot write '" << path << "': tensor '" << t.name
                                          << "' has a negative dimension");
  }

  // 2. Header JSON with contiguous offsets.
  JsonValue header = JsonValue::object();
  if (!metadata.empty()) {
    JsonValue meta = JsonValue::object();
    for (const auto &kv : metadata)
      meta.set(kv.first, JsonValue::string(kv.second));
    header.set("__metadata__", std::move(meta));
  }
  uint64_t offset = 0;
  for (TensorEntry &t : tensors) {
    t.begin = offset;
    t.end = offset += static_cast<uint64_t>(t.numel() * dtypeSize(t.dtype));
    JsonValue shape = JsonValue::array();
    for (int64_t d : t.shape)
      shape.push(JsonValue::integer(d));
    JsonValue offsets = JsonValue::array();
    offsets.push(JsonValue::integer(static_cast<int64_t>(t.begin)));
    offsets.push(JsonValue::integer(static_cast<int64_t>(t.end)));
    JsonValue entry = JsonValue::object();
    entry.set("dtype", JsonValue::string(dtypeName(t.dtype)));
    entry.set("shape", std::move(shape));
    entry.set("data_offsets", std::move(offsets));
    header.set(t.name, std::move(entry));
  }
  std::string text = writeJson(header);
  // Pad so the data buffer starts 8-byte aligned, as the Python writer does.
  while ((text.size() + 8) % 8 != 0)
    text += ' ';
  uint8_t len[8];
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(n >> (8 * i));

  // 3. The temp file with the header; the data follows as it is written.
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int file =
      ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  LOOM_CHECK(file >= 0, "cannot create '" << tmp
                                          << "': " << std::strerror(errno)
                                          << "; check that the checkpoint "
                                             "directory exists and is "
                                             "writable");
  fd = file;
  finalPath = path;
  tmpPath = tmp;
  dataStart = 8 + n;
  tensorEntries = std::move(tensors);
  written.assign(tensorEntries.size(), false);
  LOOM_CHECK(pwriteAll(fd, len, 8, 0) && pwriteAll(fd, text.data(), n, 8),
             "cannot write '" << tmp << "': " << std::strerror(errno)
                              << " (disk full?)");
  return Status::success();
}

const TensorEntry *SafetensorsWriter::entryOf(const std::string &name,
                                              size_t *index) const {
  auto it = std::lower_bound(
      tensorEntries.begin(), tensorEntries.end(), name,
      [](const TensorEntry &e, const std::string &n) { return e.name < n; });
  if (it == tensorEntries.end() || it->name != name)
    return nullptr;
  if (index)
    *index = static_cast<size_t>(it - tensorEntries.begin());
  return &*it;
}

const TensorEntry *SafetensorsWriter::find(const std::string &name) const {
  return entryOf(name, nullptr);
}

Status SafetensorsWriter::write(const std::string &name, const void *data) {
  size_t i = 0;
  const TensorEntry *e = entryOf(name, &i);
  LOOM_CHECK(fd >= 0 && e, "cannot write '" << finalPath << "': tensor '"
                                            << name << "' was not declared");
  LOOM_CHECK(!written[i], "cannot write '" << finalPath << "': tensor '" << name
                                           << "' is written twice");
  LOOM_CHECK(pwriteAll(fd, data, e->bytes(), dataStart + e->begin),
             "cannot write '" << tmpPath << "' (tensor '" << name << "'): "
                              << std::strerror(errno) << " (disk full?)");
  written[i] = true;
  return Status::success();
}

bool SafetensorsWriter::wasWritten(const std::string &name) const {
  size_t i = 0;
  return entryOf(name, &i) && written[i];
}

Status SafetensorsWriter::readBack(const std::string &name, void *dst) {
  size_t i = 0;
  const TensorEntry *e = entryOf(name, &i);
  LOOM_CHECK(fd >= 0 && e && written[i], "cannot read back tensor '"
                                             << name << "' of '" << finalPath
                                             << "': it was not written");
  LOOM_CHECK(preadAll(fd, dst, e->bytes(), dataStart + e->begin),
             "cannot read back tensor '" << name << "' from '" << tmpPath
                                         << "'");
  return Status::success();
}

Status SafetensorsWriter::commit() {
  LOOM_CHECK(fd >= 0, "cannot commit a safetensors writer that has no file");
  for (size_t i = 0; i < tensorEntries.size(); ++i)
    LOOM_CHECK(written[i], "cannot write '" << finalPath << "': tensor '"
                                            << tensorEntries[i].name
                                            << "' was declared but never "
                                               "written");
  const bool synced = ::fsync(fd) == 0;
  const bool closed = ::close(fd) == 0;
  fd = -1;
  if (!synced || !closed) {
    std::remove(tmpPath.c_str());
    LOOM_ERROR("cannot write '" << tmpPath << "' (disk full?)");
  }
  if (std::rename(tmpPath.c_str(), finalPath.c_str()) != 0) {
    const int err = errno;
    std::remove(tmpPath.c_str());
    LOOM_ERROR("cannot rename '" << tmpPath << "' to '" << finalPath
                                 << "': " << std::strerror(err));
  }
  return Status::success();
}

Status writeSafetensors(const std::string &path, const SafetensorsFile &file) {
  std::vector<TensorEntry> entries;
  for (const SafeTensor &t : file.tensors) {
    const int64_t need = t.numel() * dtypeSize(t.dtype);
    LOOM_CHECK(static_cast<int64_t>(t.data.size()) == need,
               "cannot write '" << path << "': tensor '" << t.name << "' has "
                                << t.data.size() << " bytes, but its shape x "
                                << dtypeName(t.dtype) << " needs " << need);
    TensorEntry e;
    e.name = t.name;
    e.dtype = t.dtype;
    e.shape = t.shape;
    entries.push_back(std::move(e));
  }
  SafetensorsWriter writer;
  LOOM_RETURN_IF_ERROR(writer.create(path, std::move(entries), file.metadata));
  for (const SafeTensor &t : file.tensors)
    LOOM_RETURN_IF_ERROR(writer.write(t.name, t.data.data()));
  return writer.commit();
}

} // namespace loom
