//===- safetensors.h - safetensors checkpoint reader and writer -*- C++ -*-===//
//
// Checkpoints use the safetensors format so PyTorch / HF tools read them:
// 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]},
//    ..., "__metadata__": {"key": "value"}}
// then the data buffer, offsets relative to its start. The reader treats the
// file as untrusted: every size, offset and dtype is checked and reported as a
// Status, never a crash.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_SAFETENSORS_H
#define LOOM_RUNTIME_CORE_SAFETENSORS_H

#include "runtime/core/status.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace loom {

/// Element types of the safetensors format that the runtime understands.
enum class DType { F64, F32, F16, BF16, I64, I32, I16, I8, U8, Bool };

/// The format's name for `dtype` ("F32", "BF16", ...).
const char *dtypeName(DType dtype);
/// Bytes per element of `dtype`.
int64_t dtypeSize(DType dtype);
/// Parses a format dtype name; false when unknown.
bool parseDType(const std::string &name, DType &out);

/// One named tensor with its raw little-endian bytes.
struct SafeTensor {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;

  /// Product of the shape (1 for a scalar).
  int64_t numel() const;
};

/// The contents of a safetensors file.
struct SafetensorsFile {
  std::vector<SafeTensor> tensors;
  std::map<std::string, std::string> metadata;

  /// The tensor named `name`, or nullptr.
  const SafeTensor *find(const std::string &name) const;
  /// Adds an F32 tensor copied from `values` (numel(shape) floats).
  void addF32(const std::string &name, const std::vector<int64_t> &shape,
              const float *values);
};

/// A tensor's header entry: name, dtype, shape and where its bytes lie in
/// the data buffer ("data_offsets", relative to the buffer's start).
struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;

  /// Product of the shape (1 for a scalar).
  int64_t numel() const;
  uint64_t bytes() const { return end - begin; }
};

/// A safetensors file opened for reading tensor by tensor: open() reads and
/// validates the header alone, read() fetches bytes on demand. A checkpoint
/// load then needs host memory for one rank's slice of one tensor, not for
/// the file (a 124M model's training checkpoint is 1.5 GB; every rank of a
/// job on one host would hold its own copy).
class SafetensorsReader {
public:
  SafetensorsReader() = default;
  SafetensorsReader(const SafetensorsReader &) = delete;
  SafetensorsReader &operator=(const SafetensorsReader &) = delete;
  ~SafetensorsReader();

  /// Opens `path` and validates its header: the checks readSafetensors
  /// makes, all but reading the data.
  Status open(const std::string &path);

  const std::string &path() const { return filePath; }
  /// In header order.
  const std::vector<TensorEntry> &entries() const { return tensorEntries; }
  /// The entry named `name`, or nullptr.
  const TensorEntry *find(const std::string &name) const;
  const std::map<std::string, std::string> &metadata() const { return meta; }

  /// Reads `bytes` bytes from `offset` within the data of `entry` (one of
  /// entries()) into `dst`. Errors when the range lies outside the tensor
  /// or the file can no longer be read (truncated since open()).
  Status read(const TensorEntry &entry, uint64_t offset, uint64_t bytes,
              void *dst) const;

  /// The most elements readFloat32Box reads from the file at once: bounds
  /// its raw bytes (32 MiB of F64) whatever the tensor's size.
  static constexpr int64_t kReadChunkElements = int64_t{4} << 20;

  /// Reads the box at `offset` with extent `extent` of floating-point tensor
  /// `entry`, seen with the row-major shape `global`, into dense fp32 `out`
  /// (a rank's slice of a sharded parameter: only its bytes are read).
  /// Flat indices past the tensor's own elements read as zero: a padded
  /// parameter's padding rows, which follow its real ones. Contiguous rows
  /// are read together, at most `chunkElements` at a time, through `raw`.
  Status readFloat32Box(const TensorEntry &entry,
                        const std::vector<int64_t> &global,
                        const std::vector<int64_t> &offset,
                        const std::vector<int64_t> &extent, float *out,
                        std::vector<uint8_t> &raw,
                        int64_t chunkElements = kReadChunkElements) const;

private:
  std::string filePath;
  int fd = -1;
  uint64_t dataStart = 0; // file offset of the data buffer
  std::vector<TensorEntry> tensorEntries;
  std::map<std::string, size_t> byName; // index into tensorEntries
  std::map<std::string, std::string> meta;
};

/// Writes a safetensors file tensor by tensor, so a checkpoint save needs
/// host memory for one tensor, not for the file. create() lays out the
/// declared tensors as writeSafetensors does (sorted by name, contiguous,
/// header padded to 8 bytes) and writes the header to `path.tmp.<pid>`;
/// write() puts one tensor's bytes at its offset, in any order; commit()
/// checks that every tensor was written, syncs and renames the file onto
/// `path`. A writer destroyed before commit() removes its temp file: a
/// failed save never leaves a half checkpoint.
class SafetensorsWriter {
public:
  SafetensorsWriter() = default;
  SafetensorsWriter(const SafetensorsWriter &) = delete;
  SafetensorsWriter &operator=(const SafetensorsWriter &) = delete;
  ~SafetensorsWriter();

  /// `tensors` gives names, dtypes and shapes (their offsets are ignored).
  /// Errors when a name repeats or is "__metadata__", a dimension is
  /// negative, or the temp file cannot be created.
  Status create(const std::string &path, std::vector<TensorEntry> tensors,
                const std::map<std::string, std::string> &metadata);
  /// The file's own path (not the temp file's).
  const std::string &path() const { return finalPath; }
  /// The declared tensor `name` with its offsets, or nullptr.
  const TensorEntry *find(const std::string &name) const;
  /// Writes the bytes of declared tensor `name` (its whole data, bytes()
  /// long) at its offset. Errors for an undeclared or already written name.
  Status write(const std::string &name, const void *data);
  /// Whether write() has written declared tensor `name`.
  bool wasWritten(const std::string &name) const;
  /// Reads back what write() put for `name` (bytes() long) into `dst`.
  Status readBack(const std::string &name, void *dst);
  /// Errors when a declared tensor was never written, or the file cannot be
  /// synced or renamed.
  Status commit();

private:
  std::string finalPath, tmpPath;
  int fd = -1;
  uint64_t dataStart = 0;
  std::vector<TensorEntry> tensorEntries; // sorted by name
  std::vector<bool> written;
  const TensorEntry *entryOf(const std::string &name, size_t *index) const;
};

/// Reads and validates `path`. Errors name the file and what is wrong: header
/// length beyond the file, malformed JSON, unknown dtype, bad shape, offsets
/// out of range / overlapping / not matching shape x dtype size, duplicates.
Status readSafetensors(const std::string &path, SafetensorsFile &out);

/// Parses an in-memory safetensors image (what readSafetensors does after
/// reading the file); `source` names it in error messages.
Status parseSafetensors(const std::vector<uint8_t> &bytes,
                        const std::string &source, SafetensorsFile &out);

/// Writes `file` to `path` atomically (`path.tmp.<pid>`, then rename).
/// Tensors are laid out sorted by name with contiguous offsets, and the header
/// is padded with spaces to a multiple of 8 bytes, as the Python library does.
/// Errors when a tensor's byte count does not match its shape and dtype, or
/// names repeat.
Status writeSafetensors(const std::string &path, const SafetensorsFile &file);

/// Converts a tensor of dtype F32, F16, BF16 or F64 to fp32 values.
Status toFloat32(const SafeTensor &tensor, std::vector<float> &out);
/// Converts `numel` values of `dtype` (F32, F16, BF16 or F64) at `bytes` to
/// fp32 in `out`; `name` names the tensor in the error for other dtypes.
Status toFloat32(DType dtype, const uint8_t *bytes, int64_t numel, float *out,
                 const std::string &name);

/// Converts a tensor of an integer dtype (I64, I32, I16, I8, U8, Bool) to
/// int64.
Status toInt64(const SafeTensor &tensor, std::vector<int64_t> &out);

/// Widens an IEEE half value to fp32 (exact).
float f16ToFloat(uint16_t h);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_SAFETENSORS_H
