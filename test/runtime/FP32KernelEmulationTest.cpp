//===- FP32KernelEmulationTest.cpp - The fp32 .cu kernels on the CPU ------===//
//
// The source of runtime/cuda/kernels.cu (the fp32 element-wise, embedding,
// layer norm, softmax, cross-entropy and AdamW kernels), attention.cu (the
// naive attention the executor falls back to), vocab_parallel.cu,
// transpose.cu and convert.cu, compiled as C++ on CudaEmulation.h's host
// threads and run through CudaKernelCases.inc: the same cases, inputs and
// tolerances CudaKernelTest runs on a device, on every build, GPU or not.
//
// The .cu files are included inside namespace loom_emulated, so their
// functions do not collide with the real ones loom_cuda links in.
//
//===----------------------------------------------------------------------===//
#include "CudaEmulation.h"
#include "TestUtil.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/convert.h"
#include "runtime/cuda/kernels.h"
#include "runtime/cuda/tensor_movement.h"
#include "runtime/cuda/vocab_parallel.h"

#include <cmath>
#include <vector>

// The launchers' stream-ordered temporaries on host memory. Renamed by
// macro: argument-dependent lookup on cudaStream_t would find the real
// runtime calls next to any using-declaration.
#define cudaMallocAsync cuda_emulation::runtime_api::cudaMallocAsync
#define cudaFreeAsync cuda_emulation::runtime_api::cudaFreeAsync
#define cudaMemsetAsync cuda_emulation::runtime_api::cudaMemsetAsync
namespace loom_emulated {
namespace loom {
using ::loom::Status;
namespace cuda {
using ::loom::cuda::AdamWHyper;
using ::loom::cuda::DeviceSpan;
using ::loom::cuda::kMaxTransposeRank;
namespace launch = ::cuda_emulation::launch;
} // namespace cuda
} // namespace loom
#include "runtime/cuda/attention.cu"
#include "runtime/cuda/convert.cu"
#include "runtime/cuda/kernels.cu"
#include "runtime/cuda/transpose.cu"
#include "runtime/cuda/vocab_parallel.cu"
} // namespace loom_emulated
#undef cudaMallocAsync
#undef cudaFreeAsync
#undef cudaMemsetAsync

using namespace loom;
using namespace loom::test;

namespace kernels = ::loom_emulated::loom::cuda;
template <typename T> using DeviceVector = cuda_emulation::HostVector<T>;
constexpr cudaStream_t stream = nullptr;

#define LOOM_KERNEL_TEST(Name) TEST(FP32KernelEmulation, Name)
#include "CudaKernelCases.inc"
#undef LOOM_KERNEL_TEST
