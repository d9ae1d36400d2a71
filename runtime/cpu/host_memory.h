//===- host_memory.h - Buffer memory in host RAM ----------------*- C++ -*-===//
//
// BufferMemory for the CPU backend: the arena is an anonymous mmap (page
// aligned, zeroed, only touched pages cost memory) and every copy is a
// memcpy.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_HOST_MEMORY_H
#define LOOM_RUNTIME_CPU_HOST_MEMORY_H

#include "runtime/core/buffer_memory.h"

namespace loom::cpu {

/// Host RAM as buffer memory: buffer pointers are host pointers.
class HostMemory final : public BufferMemory {
public:
  Status allocate(uint64_t bytes, uint8_t *&base) override;
  void release(uint8_t *base, uint64_t bytes) override;
  Status copyIn(void *dst, const void *hostSrc, uint64_t bytes) override;
  Status copyOut(void *hostDst, const void *src, uint64_t bytes) override;
  Status copy(void *dst, const void *src, uint64_t bytes) override;
  Status fillZero(void *dst, uint64_t bytes) override;
  Status synchronize() override { return Status::success(); }
  bool hostAccessible() const override { return true; }
};

} // namespace loom::cpu

#endif // LOOM_RUNTIME_CPU_HOST_MEMORY_H
