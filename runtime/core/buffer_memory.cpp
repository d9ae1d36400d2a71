//===- buffer_memory.cpp - Defaults of the buffer memory seam ---*- C++ -*-===//
//
// BufferMemory::copy's fallback for memories that have no copy of their own:
// through a host temporary (copyOut then copyIn), so every implementation
// supports buffer-to-buffer copies; HostMemory and CudaMemory override it.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/buffer_memory.h"

#include <vector>

namespace loom {

Status BufferMemory::copy(void *dst, const void *src, uint64_t bytes) {
  if (bytes == 0 || dst == src)
    return Status::success();
  std::vector<uint8_t> host(static_cast<size_t>(bytes));
  LOOM_RETURN_IF_ERROR(copyOut(host.data(), src, bytes));
  return copyIn(dst, host.data(), bytes);
}

} // namespace loom
