//===- loom-run.cpp - Runs a compiled Loom program --------------*- C++ -*-===//
//
// Loads a program file, initializes (or loads) the parameters, and runs N
// steps on an llm.c token file:
//
//   loom-run PROGRAM --data F --steps N [--seed S] [--stage K]
//            [--load-checkpoint F] [--save-checkpoint F] [--log-json F]
//            [--trace F.json] [--quiet]
//            [--lr F] [--min-lr F] [--warmup W] [--lr-schedule constant|cosine]
//            [--schedule-steps N]                       (training programs)
//   loom-run PROGRAM --sample N --prompt TEXT [--load-checkpoint F]
//            [--seed S] [--stage K] [--quiet]           (evaluation programs)
//
// Step s loads global batch s (TokenDataLoader, B = model.batch, T =
// model.seq). An evaluation program fills the tokens/targets buffers, runs
// the stage's instruction stream and reads the scalar loss. A training
// program (one with update_instructions) runs Executor::trainStep: every
// micro-batch's forward + backward, then clipping and AdamW with this step's
// learning rate. Its checkpoints carry the AdamW moments and the step count,
// and loading one continues the step numbering (and the data) where it
// stopped. A pipelined evaluation program (pipeline stages without an
// update) runs each stage's forward actions on the step's micro-batches and
// reports the mean loss over the batch, as the unpipelined program does.
// Any failure prints one line `loom-run: error: ...` on stderr and exits
// with code 1.
//
// Multi-rank: under `mpirun -np N loom-run ...` every rank runs the stage
// its "pp" coordinate names (0 without a pp axis or with one stage), reads its
// rows [d*B/D, (d+1)*B/D) of global batch s (d, D: its coordinate on and the
// size of the mesh axis "dp") and runs the collectives of the program over
// MPI. Rank 0 prints progress and writes the JSON log (its summary has one
// entry per rank: what the rank measured, next to what the program predicted
// when it carries predictions); each rank writes its own trace, F.json ->
// F.rank<r>.json.
// A rank that fails prints `loom-run: rank R: error: ...` and takes the job
// down (MPI_Abort).
//
// --sample N generates N tokens greedily after the prompt's bytes
// (runtime/core/sampler.h) and prints the prompt and the continuation on
// stdout; no data is read and no step runs.
//
// The run itself is runtime/core/training_run.h (flags: run_options.h);
// this file picks the backend. --backend cuda runs the executor with the
// CUDA kernels on device memory (one compute stream per rank; rank r uses
// device r modulo the node's devices) and its collectives over NCCL (the
// ncclUniqueId travels over MPI) when the job has several ranks, or on a
// single-rank communicator that copies device buffers when it has one, so a
// single GPU needs no MPI launcher. Several GPUs without an MPI launcher:
// start one process per GPU with LOOM_RANK=r, LOOM_WORLD_SIZE=N and the same
// fresh LOOM_NCCL_ID_FILE (rank 0 writes its ncclUniqueId there; NCCL then
// runs the collectives as under mpirun). A NCCL call that has not
// completed LOOM_NCCL_TIMEOUT seconds (600) after it was issued, or an
// error NCCL reports on its own, ends the rank with what it waited for
// (runtime/cuda/collective_watchdog.h), so a peer that died or hung fails
// the job instead of hanging it.
//
#include "runtime/core/backend_support.h"
#include "runtime/core/communicator.h"
#include "runtime/core/run_options.h"
#include "runtime/core/stop_request.h"
#include "runtime/core/training_run.h"
#ifdef LOOM_HAVE_CUDA
#include "runtime/cuda/check.h"
#include "runtime/cuda/comm_nccl.h"
#include "runtime/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/cuda_memory.h"
#include "runtime/cuda/device.h"
#endif
#include "runtime/program/program.h"

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

using namespace loom;

namespace {

Communicator *gComm = nullptr;

/// The backend the run uses: the executor's kernels and memory, and the
/// communicator its collectives run on (the world's, or one over it).
struct Backend {
  ExecutorBackendFactory factory; // empty: CPU kernels on host memory
  Communicator *comm = nullptr;
  /// The device's bf16 peak (TFLOP/s), 0 when unknown (the CPU).
  double peakTflops = 0;
  /// Its memory bandwidth (GB/s), 0 when unknown: a trace's roofline.
  double peakGbps = 0;
#ifdef LOOM_HAVE_CUDA
  cudaStream_t stream = nullptr;
  std::unique_ptr<Communicator> deviceComm; // NCCL, or one rank's copies
  ~Backend() {
    deviceComm.reset(); // before the stream it orders work on
    if (stream)
      cudaStreamDestroy(stream);
  }
#endif
};

/// An integer environment variable (the launcher's local rank / size), or
/// `fallback` when unset; errors when it is not a non-negative integer.
Status envInt(const char *name, int fallback, int &out) {
  const char *v = std::getenv(name);
  out = fallback;
  if (!v || !*v)
    return Status::success();
  char *end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  LOOM_CHECK(*end == '\0' && errno == 0 && n >= 0 && n <= INT32_MAX,
             name << "='" << v << "' is not a non-negative integer");
  out = static_cast<int>(n);
  return Status::success();
}

/// Ranks started without an MPI launcher (LOOM_RANK / LOOM_WORLD_SIZE):
/// size 1 when LOOM_WORLD_SIZE is unset or under mpirun (which says).
struct EnvRanks {
  int rank = 0, size = 1;
};

Status envRanks(EnvRanks &out) {
  out = EnvRanks();
  if (launchedUnderMpirun())
    return Status::success();
  LOOM_RETURN_IF_ERROR(envInt("LOOM_WORLD_SIZE", 1, out.size));
  LOOM_RETURN_IF_ERROR(envInt("LOOM_RANK", 0, out.rank));
  LOOM_CHECK(out.size >= 1, "LOOM_WORLD_SIZE=0: a job has at least one rank");
  LOOM_CHECK(out.rank < out.size,
             "LOOM_RANK=" << out.rank << " is not below LOOM_WORLD_SIZE="
                          << out.size);
  return Status::success();
}

#ifdef LOOM_HAVE_CUDA
/// --backend cuda: device, compute stream, kernels on device memory, and
/// NCCL (several ranks: under mpirun, or started with LOOM_RANK /
/// LOOM_WORLD_SIZE) or a single-rank communicator (one).
Status createCudaBackend(const RunOptions &opts, Communicator &world,
                         const EnvRanks &env, Backend &out) {
  // 1. The program first: one the CUDA kernels cannot run is refused on
  //    any machine, before a device is touched, naming what is missing.
  program::LoadedProgram loaded;
  LOOM_RETURN_IF_ERROR(program::loadProgramFile(opts.program, loaded));
  LOOM_RETURN_IF_ERROR(checkBackendSupports(*loaded.root(), opts.program,
                                            KernelBackendKind::Cuda));
  // 2. The libraries the backend loads when first used (cuda_libraries.h):
  //    cuBLASLt always, NCCL when there are several ranks.
  const int rank = env.size > 1 ? env.rank : world.rank();
  const int size = env.size > 1 ? env.size : world.size();
  LOOM_RETURN_IF_ERROR(cuda::loadCublasLt().withContext("--backend cuda"));
  if (size > 1)
    LOOM_RETURN_IF_ERROR(cuda::loadNccl().withContext(
        "--backend cuda on " + std::to_string(size) + " ranks"));
  // 3. This rank's device: local rank r of the node takes device r. NCCL
  //    refuses two ranks on one device, so say so before it does.
  int devices = 0;
  LOOM_RETURN_IF_ERROR(cuda::probeDevice(devices));
  int localRank = 0, localSize = 0, mpiLocal = 0;
  LOOM_RETURN_IF_ERROR(envInt("MPI_LOCALRANKID", rank, mpiLocal));
  LOOM_RETURN_IF_ERROR(
      envInt(env.size > 1 ? "LOOM_LOCAL_RANK" : "OMPI_COMM_WORLD_LOCAL_RANK",
             mpiLocal, localRank));
  LOOM_RETURN_IF_ERROR(envInt(env.size > 1 ? "LOOM_LOCAL_WORLD_SIZE"
                                           : "OMPI_COMM_WORLD_LOCAL_SIZE",
                              size, localSize));
  LOOM_CHECK(size == 1 || localSize <= devices,
             "--backend cuda: "
                 << localSize << " ranks on this node but " << devices
                 << " CUDA device(s); NCCL needs one device "
                    "per rank, so start at most "
                 << devices << " ranks per node"
                 << (env.size > 1 ? " (a --mesh of at most that many "
                                    "ranks for `loom`, or "
                                    "LOOM_LOCAL_WORLD_SIZE)"
                                  : " (mpirun -np / --npernode)"));
  LOOM_CUDA_CHECK(cudaSetDevice(localRank % devices));
  out.peakTflops = cuda::deviceBf16PeakTflops(localRank % devices);
  out.peakGbps = cuda::deviceMemoryBandwidthGbps(localRank % devices);
  LOOM_CUDA_CHECK(
      cudaStreamCreateWithFlags(&out.stream, cudaStreamNonBlocking));
  // 4. Collectives: NCCL over the MPI world (ncclUniqueId broadcast over
  //    MPI), or one rank's device-to-device copies.
  //    A NCCL call not completed within LOOM_NCCL_TIMEOUT seconds ends the
  //    rank (collective_watchdog.h; 0: never), so a dead or hung peer
  //    fails the job instead of hanging it.
  int ncclTimeout = 0;
  LOOM_RETURN_IF_ERROR(
      envInt("LOOM_NCCL_TIMEOUT",
             static_cast<int>(cuda::kDefaultNcclTimeoutSeconds), ncclTimeout));
  if (env.size > 1) {
    const char *idFile = std::getenv("LOOM_NCCL_ID_FILE");
    int timeout = 0;
    LOOM_RETURN_IF_ERROR(envInt("LOOM_NCCL_ID_TIMEOUT", 120, timeout));
    std::unique_ptr<cuda::NcclCommunicator> nccl;
    LOOM_RETURN_IF_ERROR(
        cuda::createNcclFileCommunicator(env.rank, env.size,
                                         idFile ? idFile : "", timeout,
                                         out.stream, nccl, ncclTimeout)
            .withContext("--backend cuda on " + std::to_string(env.size) +
                         " ranks started without mpirun"));
    out.deviceComm = std::move(nccl);
  } else if (world.size() > 1) {
    std::unique_ptr<cuda::NcclCommunicator> nccl;
    LOOM_RETURN_IF_ERROR(
        cuda::createNcclWorldCommunicator(world, out.stream, nccl, ncclTimeout)
            .withContext("--backend cuda on " + std::to_string(world.size()) +
                         " ranks"));
    out.deviceComm = std::move(nccl);
  } else {
    out.deviceComm = std::make_unique<SingleRankCommunicator>();
  }
  out.comm = out.deviceComm.get();
  // 5. The executor's kernels and memory, on the compute stream.
  cudaStream_t stream = out.stream;
  out.factory = [stream](std::unique_ptr<KernelBackend> &kernels,
                         std::unique_ptr<BufferMemory> &memory) -> Status {
    std::unique_ptr<cuda::CudaKernels> k;
    LOOM_RETURN_IF_ERROR(cuda::CudaKernels::create(stream, k));
    kernels = std::move(k);
    memory = std::make_unique<cuda::CudaMemory>(stream);
    return Status::success();
  };
  return Status::success();
}
#endif

/// --backend: cpu always runs; cuda needs the CUDA backend in this build and
/// a device (the error says what cudaGetDeviceCount returned and what to
/// run instead).
Status createBackend(const RunOptions &opts, Communicator &world,
                     Backend &out) {
  out.comm = &world;
  EnvRanks env;
  LOOM_RETURN_IF_ERROR(envRanks(env));
  LOOM_CHECK(env.size == 1 || opts.backend == "cuda",
             "LOOM_WORLD_SIZE=" << env.size
                                << " without mpirun starts ranks for "
                                   "--backend cuda (NCCL); CPU ranks "
                                   "communicate over MPI: run mpirun -np "
                                << env.size << " loom-run ...");
  if (opts.backend == "cpu")
    return Status::success();
#ifdef LOOM_HAVE_CUDA
  return createCudaBackend(opts, world, env, out);
#else
  LOOM_ERROR("--backend cuda: this loom-run was built without the CUDA "
             "backend (LOOM_ENABLE_CUDA=OFF, or no nvcc at configure time); "
             "rebuild where /usr/local/cuda exists, or run with --backend "
             "cpu");
#endif
}

/// Prints the error; in a multi-rank job names the rank and takes every
/// rank down (MPI_Abort), so no rank hangs in a collective.
int fail(const std::string &message, bool usage) {
  // Ranks started without mpirun that fail before NCCL connects them name
  // their LOOM_RANK: each prints the same error.
  EnvRanks env;
  if ((!gComm || gComm->size() == 1) && envRanks(env).ok() && env.size > 1) {
    std::fprintf(stderr, "loom-run: rank %d: error: %s\n", env.rank,
                 message.c_str());
    return 1;
  }
  if (gComm && gComm->size() > 1) {
    std::fprintf(stderr, "loom-run: rank %d: error: %s\n", gComm->rank(),
                 message.c_str());
    std::fflush(stderr);
    gComm->abort(1);
  }
  std::fprintf(stderr, "loom-run: error: %s\n", message.c_str());
  if (usage)
    std::fprintf(stderr, "%s", kLoomRunUsage);
  return 1;
}

} // namespace

int main(int argc, char **argv) {
  std::unique_ptr<Communicator> comm;
  Backend backend; // outlives the handlers below (gComm may point into it)
  try {
    Status s = createWorldCommunicator(&argc, &argv, comm);
    if (!s.ok())
      return fail(s.message(), false);
    gComm = comm.get();
    RunOptions opts;
    bool help = false;
    s = parseRunOptions(argc, argv, opts, help);
    if (!s.ok())
      return fail(s.message(), /*usage=*/comm->rank() == 0);
    if (help) {
      if (comm->rank() == 0)
        std::printf("%s", kLoomRunUsage);
      return 0;
    }
    s = createBackend(opts, *comm, backend);
    if (!s.ok())
      return fail(s.message(), /*usage=*/false);
    if (opts.peakTflops == 0)
      opts.peakTflops = backend.peakTflops;
    opts.peakGbps = backend.peakGbps;
    // Ranks started without mpirun know each other only through NCCL: a
    // failing one names itself and aborts its NCCL communicators.
    if (backend.comm->size() > comm->size())
      gComm = backend.comm;
    if (opts.sample >= 0) {
      s = runSample(opts, backend.factory);
      return s.ok() ? 0 : fail(s.message(), /*usage=*/false);
    }
    // Ctrl-C, SIGTERM or SIGUSR1 (mpirun's forwarding) stop the run after
    // the step in progress, which saves --save-checkpoint.
    installStopRequestHandlers();
    RunOutcome outcome;
    s = runProgram(opts, *backend.comm, backend.factory, &outcome);
    if (!s.ok())
      return fail(s.message(), /*usage=*/false);
    // A run cut short is not a success, though it ended cleanly: the
    // status a shell gives a command the signal ended -- unless the
    // launcher asks for another (LOOM_STOP_EXIT_STATUS): `loom` asks ranks
    // under mpirun for 0, since mpirun answers a rank's non-zero status by
    // calling the job aborted, and gives that status itself.
    if (!outcome.stopSignal)
      return 0;
    int status = 128 + outcome.stopSignal;
    s = envInt("LOOM_STOP_EXIT_STATUS", status, status);
    if (!s.ok() || status > 255)
      return fail(s.ok() ? "LOOM_STOP_EXIT_STATUS is above 255" : s.message(),
                  false);
    return status;
  } catch (const std::exception &e) {
    return fail(std::string("internal error: ") + e.what(), false);
  } catch (...) {
    return fail("internal error", false);
  }
}
