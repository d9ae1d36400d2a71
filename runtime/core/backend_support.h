//===- backend_support.h - Which opcodes each kernel backend runs -*- C++
//-*-===//
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

} // namespace loom

#endif // LOOM_RUNTIME_CORE_BACKEND_SUPPORT_H
