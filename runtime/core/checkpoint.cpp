//===- checkpoint.cpp - Parameters to and from safetensors -----*- C++ -*-===//
#include "runtime/core/checkpoint.h"

#include "runtime/core/safetensors.h"

#include <cstring>

namespace loom {

namespace {

/// Copies the box at `offset` with extent `local` out of a row-major tensor
/// of shape `global` into dense `out`.
void copySlice(float *out, const float *full,
               const std::vector<int64_t> &global,
               const std::vector<int64_t> &offset,
               const std::vector<int64_t> &local) {
  const size_t rank = global.size();
  if (rank == 0) {
    out[0] = full[0];
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * global[d];
  const int64_t inner = local[rank - 1];
  int64_t runs = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    runs *= local[d];
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d)
      src += (offset[d] + index[d]) * stride[d];
    std::memcpy(out + r * inner, full + src, inner * sizeof(float));
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < local[d])
        break;
      index[d] = 0;
    }
  }
}

std::string shapeStr(const std::vector<int64_t> &s) {
  return program::shapeString(s);
}

} // namespace

Status loadCheckpoint(Executor &executor, const std::string &path) {
  SafetensorsFile file;
  LOOM_RETURN_IF_ERROR(readSafetensors(path, file));
  std::vector<float> values;
  for (const ParamView &p : executor.params()) {
    const SafeTensor *t = file.find(p.name);
    LOOM_CHECK(t, "checkpoint '" << path << "' has no tensor '" << p.name
                                 << "' (the program's parameter); was it "
                                    "saved from a different model?");
    LOOM_CHECK(t->shape == p.globalShape,
               "checkpoint '" << path << "': tensor '" << p.name
                              << "' has shape " << shapeStr(t->shape)
                              << " but the program expects "
                              << shapeStr(p.globalShape));
    Status s = toFloat32(*t, values);
    if (!s.ok())
      return s.withContext("checkpoint '" + path + "', tensor '" + p.name +
                           "'");
    copySlice(static_cast<float *>(executor.bufferData(p.buffer)),
              values.data(), p.globalShape, p.sliceOffset, p.localShape);
  }
  return Status::success();
}

Status saveCheckpoint(const Executor &executor, const std::string &path) {
  SafetensorsFile file;
  file.metadata["format"] = "pt";
  file.metadata["producer"] = "loom";
  for (const ParamView &p : executor.params()) {
    LOOM_CHECK(p.localShape == p.globalShape,
               "cannot save '" << path << "': parameter '" << p.name
                               << "' is sliced (local "
                               << shapeStr(p.localShape) << " of global "
                               << shapeStr(p.globalShape)
                               << "); saving sharded parameters needs the "
                                  "multi-rank runtime");
    file.addF32(p.name, p.globalShape,
                static_cast<const float *>(executor.bufferData(p.buffer)));
  }
  return writeSafetensors(path, file);
}

} // namespace loom
