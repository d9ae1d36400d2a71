//===- EmulatedCudaRuntime.h - What the emulated runtime can tell -*- C++ -*-===//
//
// loom_cuda_emulated links EmulatedCudaRuntime.cpp, EmulatedCublasLt.cpp and
// EmulatedNccl.cpp instead of libcudart, libcublasLt and libnccl (see there).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_EMULATEDCUDARUNTIME_H
#define LOOM_TEST_RUNTIME_EMULATEDCUDARUNTIME_H

#include <cstdint>

namespace loom::test {

/// Bytes of "device" memory (cudaMalloc / cudaMallocAsync) not yet freed.
uint64_t emulatedDeviceBytes();

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_EMULATEDCUDARUNTIME_H
