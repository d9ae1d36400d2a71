//===- GuardedRun.cpp - loom-run on untouchable memory ----------*- C++ -*-===//
//
// loom-run-guarded takes loom-run's command line and runs the same driver
// (runtime/core/training_run.h) with PoisonedMemory and GuardedKernels
// (PoisonedMemory.h) as the executor's backend: the stand-in for a device
// on a machine without one. Under mpirun the MPI communicator stages the
// poisoned buffers through the host, as it would a device arena. Training,
// checkpoint save and resume, evaluation, pipelined evaluation and sampling
// must then give what `loom-run --backend cpu` gives, bit for bit
// (test/e2e/train-guarded-memory.test): any host read or write of buffer
// memory outside BufferMemory faults, and any host pointer handed to a
// kernel or a buffer copy is an error. On success it prints on stderr what
// went through the guard, so a run that silently used host memory shows
// zeros.
//
//===----------------------------------------------------------------------===//
#include "PoisonedMemory.h"

#include "runtime/core/communicator.h"
#include "runtime/core/run_options.h"
#include "runtime/core/training_run.h"

#include <cinttypes>
#include <cstdio>
#include <exception>
#include <memory>
#include <string>

using namespace loom;
using namespace loom::test;

namespace {

Communicator *gComm = nullptr;

int fail(const std::string &message) {
  if (gComm && gComm->size() > 1) {
    std::fprintf(stderr, "loom-run-guarded: rank %d: error: %s\n",
                 gComm->rank(), message.c_str());
    std::fflush(stderr);
    gComm->abort(1);
  }
  std::fprintf(stderr, "loom-run-guarded: error: %s\n", message.c_str());
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  std::unique_ptr<Communicator> comm;
  try {
    Status s = createWorldCommunicator(&argc, &argv, comm);
    if (!s.ok())
      return fail(s.message());
    gComm = comm.get();
    RunOptions opts;
    bool help = false;
    s = parseRunOptions(argc, argv, opts, help);
    if (!s.ok() || help)
      return fail(help ? "takes loom-run's flags (see loom-run --help)"
                       : s.message());
    if (opts.backend != "cpu")
      return fail("--backend " + opts.backend +
                  ": loom-run-guarded plays the device itself; drop --backend");
    ExecutorBackendFactory guarded = [](std::unique_ptr<KernelBackend> &kernels,
                                        std::unique_ptr<BufferMemory> &memory) {
      auto poisoned = std::make_unique<PoisonedMemory>();
      kernels = std::make_unique<GuardedKernels>(*poisoned);
      memory = std::move(poisoned);
      return Status::success();
    };
    s = opts.sample >= 0 ? runSample(opts, guarded)
                         : runProgram(opts, *comm, guarded);
    if (!s.ok())
      return fail(s.message());
    const GuardCounters &c = guardCounters();
    std::fprintf(stderr,
                 "loom-run-guarded: rank %d: %" PRIu64
                 " poisoned allocations, %" PRIu64 " buffer copies, %" PRIu64
                 " guarded kernel calls\n",
                 comm->rank(), c.allocations, c.copies, c.kernelCalls);
    return 0;
  } catch (const std::exception &e) {
    return fail(std::string("internal error: ") + e.what());
  }
}
