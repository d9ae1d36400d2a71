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

/// Converts a tensor of an integer dtype (I64, I32, I16, I8, U8, Bool) to
/// int64.
Status toInt64(const SafeTensor &tensor, std::vector<int64_t> &out);

/// Widens an IEEE half value to fp32 (exact).
float f16ToFloat(uint16_t h);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_SAFETENSORS_H
