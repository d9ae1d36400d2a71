//===- backend_support.h - Which opcodes each backend runs ------*- C++ -*-===//
//
// The same program runs on the CPU or the CUDA backend (DESIGN.md §5), but
// the CUDA kernels (runtime/cuda/, cuda::CudaKernels) are written after the
// CPU ones, so an opcode may exist in the schema before it has a CUDA kernel.
// loom-run checks a program against the backend right after loading it, so
// a program the backend cannot run is refused up front with the list of what
// is missing, never halfway through a step. Compiled into every build (no CUDA
// headers), so the check is tested on machines without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_BACKEND_SUPPORT_H
#define LOOM_RUNTIME_CORE_BACKEND_SUPPORT_H

#include "runtime/core/status.h"
#include "runtime/program/program.h"

#include <string>
#include <vector>

namespace loom {

/// A kernel backend loom-run can execute on (--backend).
enum class KernelBackendKind { Cpu, Cuda };

/// "cpu" / "cuda".
const char *backendName(KernelBackendKind backend);

/// One kind of instruction a backend has no kernel for, with where it occurs.
struct MissingKernel {
  /// The opcode's schema name, plus the variant when only a variant is
  /// missing ("Embedding (vocab-parallel rows)").
  std::string kernel;
  /// Instructions of the program that need it (all stages, all lists).
  int64_t count = 0;
  /// The first such instruction: its stage index and source op name.
  uint32_t firstStage = 0;
  std::string firstName;
};

/// The kernels `backend` lacks for `program`, in opcode order of first
/// appearance; empty when it can run every instruction of every stage
/// (instructions, update_instructions and every pipeline chunk's forward /
/// backward list). Reads only opcodes, axes and names.
std::vector<MissingKernel> missingKernels(const program::Program &program,
                                          KernelBackendKind backend);

/// Errors, naming the program (`source`), every missing kernel and where it
/// is first used, when `backend` cannot run all of `program`.
Status checkBackendSupports(const program::Program &program,
                            const std::string &source,
                            KernelBackendKind backend);

/// Whether the CUDA backend runs `op` on BF16 operands itself
/// (cuda::CudaKernels::handlesBF16Natively: cuBLASLt bf16 GEMMs, the bf16
/// flash attention, runtime/cuda/kernels_bf16.h) rather than through the
/// executor's fp32 staging (bf16_staging.h), which would convert around the
/// kernel. The list lives here, without CUDA headers, so that GPU-less
/// builds test it against compiled programs.
bool cudaRunsBF16Natively(program::Opcode op);

/// The instructions of `program` with BF16 operands that the CUDA backend
/// would run through the executor's fp32 staging (the opcodes
/// cudaRunsBF16Natively lacks), in MissingKernel's form: opcode, count,
/// first instruction. Empty for every program the compiler emits today.
std::vector<MissingKernel>
cudaBF16StagedKernels(const program::Program &program);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_BACKEND_SUPPORT_H
