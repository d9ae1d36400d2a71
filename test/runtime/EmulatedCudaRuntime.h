//===- EmulatedCudaRuntime.h - What the emulated runtime can tell -*- C++ -*-===//
//
// loom-cuda-emulation-tests links EmulatedCudaRuntime.cpp and
// EmulatedCublasLt.cpp instead of libcudart and libcublasLt (see there).
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
