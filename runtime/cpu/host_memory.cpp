//===- host_memory.cpp - Buffer memory in host RAM --------------*- C++ -*-===//
//
// MAP_NORESERVE: a program planned for a bigger machine fails on the pages
// it touches, not up front, as the executor always behaved.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/host_memory.h"

#include <cstring>
#include <sys/mman.h>

namespace loom::cpu {

Status HostMemory::allocate(uint64_t bytes, uint8_t *&base) {
  base = nullptr;
  if (bytes == 0)
    return Status::success();
  void *p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  LOOM_CHECK(p != MAP_FAILED,
             "cannot allocate "
                 << bytes
                 << " bytes in host memory; the program needs more memory "
                    "than this machine offers");
  base = static_cast<uint8_t *>(p);
  return Status::success();
}

void HostMemory::release(uint8_t *base, uint64_t bytes) {
  if (base)
    ::munmap(base, bytes);
}

Status HostMemory::copyIn(void *dst, const void *hostSrc, uint64_t bytes) {
  if (bytes > 0)
    std::memcpy(dst, hostSrc, bytes);
  return Status::success();
}

Status HostMemory::copyOut(void *hostDst, const void *src, uint64_t bytes) {
  if (bytes > 0)
    std::memcpy(hostDst, src, bytes);
  return Status::success();
}

Status HostMemory::copy(void *dst, const void *src, uint64_t bytes) {
  if (bytes > 0 && dst != src)
    std::memmove(dst, src, bytes);
  return Status::success();
}

Status HostMemory::fillZero(void *dst, uint64_t bytes) {
  if (bytes > 0)
    std::memset(dst, 0, bytes);
  return Status::success();
}

} // namespace loom::cpu
