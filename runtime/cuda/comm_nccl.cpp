//===- comm_nccl.cpp - The Communicator over NCCL -------------------------===//
#include "runtime/cuda/comm_nccl.h"

#include "runtime/cuda/check.h"
#include "runtime/cuda/cuda_libraries.h"
#include "runtime/cuda/reduce_members.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nccl.h>
#include <thread>
#include <unistd.h>
#ifdef LOOM_HAVE_MPI
#include <mpi.h>
#endif

namespace loom::cuda {

namespace {

Status ncclTypeOf(program::DType dtype, ncclDataType_t &out) {
  switch (dtype) {
  case program::DType::F32:
    out = ncclFloat32;
    return Status::success();
  case program::DType::I32:
    out = ncclInt32;
    return Status::success();
  case program::DType::BF16:
    out = ncclBfloat16;
    return Status::success();
  }
  LOOM_ERROR("NCCL: unsupported dtype " << static_cast<int>(dtype));
}

Status ncclOpOf(program::Reduction op, ncclRedOp_t &out) {
  switch (op) {
  case program::Reduction::Sum:
    out = ncclSum;
    return Status::success();
  case program::Reduction::Max:
    out = ncclMax;
    return Status::success();
  case program::Reduction::Min:
    out = ncclMin;
    return Status::success();
  case program::Reduction::Avg:
    out = ncclAvg;
    return Status::success();
  }
  LOOM_ERROR("NCCL: unsupported reduction " << static_cast<int>(op));
}

size_t elemBytes(program::DType dtype) {
  return static_cast<size_t>(program::dtypeBytes(dtype));
}

} // namespace

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

template <typename Describe, typename Call>
Status NcclCommunicator::watched(cudaStream_t stream, Describe &&what,
                                 Call &&call) {
  if (!watchdog)
    return call();
  const CollectiveWatchdog::Id id = watchdog->begin(what());
  Status s = call();
  if (!s.ok() || !stream) {
    watchdog->finished(id);
    return s;
  }
  return watchdog->issued(id, stream);
}

Status NcclCommunicator::create(int rank, int size, const void *uniqueId,
                                cudaStream_t computeStream,
                                double timeoutSeconds,
                                std::unique_ptr<NcclCommunicator> &out) {
  LOOM_RETURN_IF_ERROR(loadNccl());
  LOOM_CHECK(timeoutSeconds >= 0, "the NCCL timeout must not be negative (got "
                                      << timeoutSeconds << " s)");
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(rank, size));
  c->compute = computeStream;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  LOOM_CUDA_CHECK(
      cudaEventCreateWithFlags(&c->computeDone, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&c->commDone, cudaEventDisableTiming));
  // Watched from the start: joining waits for every rank to join.
  if (timeoutSeconds > 0) {
    NcclCommunicator *self = c.get();
    c->watchdog = std::make_unique<CollectiveWatchdog>(
        timeoutSeconds, [self] { return self->asyncErrors(); },
        [self](const std::string &message) { self->stalled(message); });
  }
  ncclUniqueId id;
  std::memcpy(&id, uniqueId, sizeof(id));
  ncclComm_t comm = nullptr;
  LOOM_RETURN_IF_ERROR(c->watched(
      nullptr,
      [&] {
        return "ncclCommInitRank (joining the world of " +
               std::to_string(size) + " ranks)";
      },
      [&] {
        LOOM_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
        return Status::success();
      }));
  {
    std::lock_guard<std::mutex> lock(c->commsMutex);
    c->world = comm;
  }
  // The two point-to-point lanes: duplicates of the world (same ranks),
  // each with its own stream (collective: every rank creates both here).
  for (P2pLane *lane : {&c->up, &c->down}) {
    ncclComm_t dup = nullptr;
    LOOM_RETURN_IF_ERROR(c->watched(
        nullptr, [] { return "ncclCommSplit (a point-to-point lane)"; },
        [&] {
          LOOM_NCCL_CHECK(ncclCommSplit(comm, 0, rank, &dup, nullptr));
          return Status::success();
        }));
    {
      std::lock_guard<std::mutex> lock(c->commsMutex);
      lane->comm = dup;
    }
    LOOM_CUDA_CHECK(
        cudaStreamCreateWithFlags(&lane->stream, cudaStreamNonBlocking));
    LOOM_CUDA_CHECK(
        cudaEventCreateWithFlags(&lane->done, cudaEventDisableTiming));
  }
  out = std::move(c);
  return Status::success();
}

NcclCommunicator::~NcclCommunicator() {
  if (stream)
    cudaStreamSynchronize(stream);
  for (P2pLane *lane : {&up, &down})
    if (lane->stream)
      cudaStreamSynchronize(lane->stream);
  // Everything issued has completed: nothing left to watch.
  watchdog.reset();
  for (P2pLane *lane : {&up, &down}) {
    if (lane->stream)
      cudaStreamDestroy(lane->stream);
    if (lane->comm)
      ncclCommDestroy(lane->comm);
    if (lane->done)
      cudaEventDestroy(lane->done);
  }
  for (auto &[mask, comm] : groups)
    ncclCommDestroy(comm);
  groups.clear();
  if (world)
    ncclCommDestroy(world);
  for (auto &[t, e] : tickets)
    cudaEventDestroy(e);
  if (computeDone)
    cudaEventDestroy(computeDone);
  if (commDone)
    cudaEventDestroy(commDone);
  if (stream)
    cudaStreamDestroy(stream);
}

void NcclCommunicator::abort(int code) {
  // Also called on the watchdog's thread while this one may be blocked in a
  // NCCL call: abort (not destroy) is what NCCL allows then.
  std::vector<ncclComm *> all;
  {
    std::lock_guard<std::mutex> lock(commsMutex);
    all = communicatorsLocked();
  }
  for (ncclComm *comm : all)
    ncclCommAbort(comm);
  std::_Exit(code);
}

std::vector<ncclComm *> NcclCommunicator::communicatorsLocked() const {
  std::vector<ncclComm *> all;
  for (const auto &[mask, comm] : groups)
    all.push_back(comm);
  for (const P2pLane *lane : {&up, &down})
    if (lane->comm)
      all.push_back(lane->comm);
  if (world)
    all.push_back(world);
  return all;
}

std::string NcclCommunicator::asyncErrors() const {
  // Under the lock: no communicator is destroyed while it is asked.
  std::lock_guard<std::mutex> lock(commsMutex);
  for (ncclComm *comm : communicatorsLocked()) {
    ncclResult_t error = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm, &error);
    if (asked != ncclSuccess)
      return std::string("ncclCommGetAsyncError failed: ") +
             ncclGetErrorString(asked);
    // ncclInProgress: a non-blocking call still running, not an error.
    if (error != ncclSuccess && error != ncclInProgress)
      return std::string(ncclGetErrorString(error)) + " (ncclResult_t " +
             std::to_string(static_cast<int>(error)) + ")";
  }
  return std::string();
}

void NcclCommunicator::stalled(const std::string &message) {
  std::fprintf(stderr, "loom-run: rank %d: error: %s; ending this rank\n",
               rank(), message.c_str());
  std::fflush(stderr);
  abort(1);
}

std::string
NcclCommunicator::axesName(const std::vector<uint32_t> &axes) const {
  std::string names;
  for (uint32_t a : axes)
    if (a < meshAxes.size())
      names += (names.empty() ? "" : ",") + meshAxes[a].name;
  return groupSize(axes) == size() || names.empty() ? "the world"
                                                    : "mesh axes " + names;
}

std::string
NcclCommunicator::describe(const char *op, int64_t count, program::DType dtype,
                           const std::vector<uint32_t> &axes) const {
  return std::string(op) + " of " + std::to_string(count) + " " +
         program::EnumNameDType(dtype) + " over " + axesName(axes);
}

void NcclCommunicator::meshChanged() {
  // setMesh runs for the driver and again for the executor: same mesh, same
  // groups.
  bool same = splitFor.size() == meshAxes.size();
  for (size_t a = 0; same && a < meshAxes.size(); ++a)
    same = splitFor[a].name == meshAxes[a].name &&
           splitFor[a].size == meshAxes[a].size;
  if (same && !groups.empty())
    return;
  std::map<uint64_t, ncclComm *> old;
  {
    std::lock_guard<std::mutex> lock(commsMutex);
    old.swap(groups);
  }
  for (auto &[mask, comm] : old)
    ncclCommDestroy(comm);
  splitFor = meshAxes;
  splitStatus = splitGroups();
}

Status NcclCommunicator::splitGroups() {
  // Every proper, non-empty set of mesh axes (the whole mesh is the world),
  // in mask order, so that every rank makes the same collective calls.
  const size_t n = meshAxes.size();
  LOOM_CHECK(n < 16, "NCCL: a mesh of " << n << " axes has too many groups");
  const std::vector<int64_t> c = coords();
  for (uint64_t mask = 1; mask + 1 < (uint64_t(1) << n); ++mask) {
    std::vector<uint32_t> axes;
    for (uint32_t a = 0; a < n; ++a)
      if (mask >> a & 1)
        axes.push_back(a);
    // 1. Color: this rank's coordinates on the other axes (one group each);
    //    key: the group rank, so NCCL ranks are group ranks.
    int64_t color = 0;
    for (size_t a = 0; a < n; ++a)
      if (!(mask >> a & 1))
        color = color * meshAxes[a].size + c[a];
    ncclComm_t split = nullptr;
    LOOM_RETURN_IF_ERROR(watched(
        nullptr,
        [&] { return "ncclCommSplit (the group over " + axesName(axes) + ")"; },
        [&] {
          LOOM_NCCL_CHECK(ncclCommSplit(world, static_cast<int>(color),
                                        static_cast<int>(groupRank(axes)),
                                        &split, nullptr));
          return Status::success();
        }));
    std::lock_guard<std::mutex> lock(commsMutex);
    groups[mask] = split;
  }
  return Status::success();
}

Status NcclCommunicator::group(const std::vector<uint32_t> &axes,
                               ncclComm *&comm) {
  LOOM_RETURN_IF_ERROR(splitStatus);
  // Every axis of the mesh: the world itself.
  if (groupSize(axes) == size()) {
    comm = world;
    return Status::success();
  }
  auto it = groups.find(axesMask(axes));
  LOOM_CHECK(it != groups.end(), "NCCL: no group over the mesh axes given "
                                 "(was the mesh set on this communicator?)");
  comm = it->second;
  return Status::success();
}

Status NcclCommunicator::beginOnCommStream() {
  LOOM_CUDA_CHECK(cudaEventRecord(computeDone, compute));
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(stream, computeDone, 0));
  return Status::success();
}

Status NcclCommunicator::endOnComputeStream() {
  LOOM_CUDA_CHECK(cudaEventRecord(commDone, stream));
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute, commDone, 0));
  return Status::success();
}

Status NcclCommunicator::startTicket(Ticket &ticket) {
  cudaEvent_t e = nullptr;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventRecord(e, stream));
  ticket = nextTicket++;
  tickets[ticket] = e;
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

Status NcclCommunicator::doAllReduce(void *buf, int64_t count,
                                     program::DType dtype,
                                     program::Reduction op,
                                     const std::vector<uint32_t> &axes) {
  Ticket t = -1;
  LOOM_RETURN_IF_ERROR(doStartAllReduce(buf, count, dtype, op, axes, t));
  return doComplete(t);
}

template <typename Issue>
Status NcclCommunicator::startCollective(const char *op, int64_t count,
                                         program::DType dtype,
                                         const std::vector<uint32_t> &axes,
                                         Ticket &ticket, Issue &&issue) {
  ncclComm *comm = nullptr;
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  LOOM_RETURN_IF_ERROR(watched(
      stream, [&] { return describe(op, count, dtype, axes); },
      [&]() -> Status {
        const ncclResult_t r = issue(comm, type);
        LOOM_CHECK(r == ncclSuccess,
                   "NCCL " << describe(op, count, dtype, axes)
                           << " failed: " << ncclGetErrorString(r));
        return Status::success();
      }));
  return startTicket(ticket);
}

Status NcclCommunicator::doStartAllReduce(void *buf, int64_t count,
                                          program::DType dtype,
                                          program::Reduction op,
                                          const std::vector<uint32_t> &axes,
                                          Ticket &ticket) {
  ncclRedOp_t red;
  LOOM_RETURN_IF_ERROR(ncclOpOf(op, red));
  return startCollective("all_reduce", count, dtype, axes, ticket,
                         [&](ncclComm *comm, ncclDataType_t type) {
                           return ncclAllReduce(buf, buf,
                                                static_cast<size_t>(count),
                                                type, red, comm, stream);
                         });
}

Status NcclCommunicator::doStartAllGather(const void *in, void *out,
                                          int64_t count, program::DType dtype,
                                          const std::vector<uint32_t> &axes,
                                          Ticket &ticket) {
  return startCollective("all_gather", count, dtype, axes, ticket,
                         [&](ncclComm *comm, ncclDataType_t type) {
                           return ncclAllGather(in, out,
                                                static_cast<size_t>(count),
                                                type, comm, stream);
                         });
}

Status NcclCommunicator::doComplete(Ticket ticket) {
  if (ticket < 0)
    return Status::success();
  auto it = tickets.find(ticket);
  LOOM_CHECK(it != tickets.end(), "NCCL: unknown ticket " << ticket);
  // The compute stream (not the host) waits: later kernels see the result.
  cudaEvent_t e = it->second;
  tickets.erase(it);
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute, e, 0));
  LOOM_CUDA_CHECK(cudaEventDestroy(e));
  return Status::success();
}

Status NcclCommunicator::doAllGather(const void *in, void *out, int64_t count,
                                     program::DType dtype,
                                     const std::vector<uint32_t> &axes) {
  Ticket t = -1;
  LOOM_RETURN_IF_ERROR(doStartAllGather(in, out, count, dtype, axes, t));
  return doComplete(t);
}

Status NcclCommunicator::doReduceScatter(const void *in, void *out,
                                         int64_t count, program::DType dtype,
                                         program::Reduction op,
                                         const std::vector<uint32_t> &axes) {
  Ticket t = -1;
  LOOM_RETURN_IF_ERROR(
      doStartReduceScatter(in, out, count, dtype, op, axes, t));
  return doComplete(t);
}

Status NcclCommunicator::doStartReduceScatter(
    const void *in, void *out, int64_t count, program::DType dtype,
    program::Reduction op, const std::vector<uint32_t> &axes, Ticket &ticket) {
  ncclRedOp_t red;
  LOOM_RETURN_IF_ERROR(ncclOpOf(op, red));
  return startCollective("reduce_scatter", count, dtype, axes, ticket,
                         [&](ncclComm *comm, ncclDataType_t type) {
                           return ncclReduceScatter(in, out,
                                                    static_cast<size_t>(count),
                                                    type, red, comm, stream);
                         });
}

Status NcclCommunicator::doAllToAll(const void *in, void *out, int64_t count,
                                    program::DType dtype,
                                    const std::vector<uint32_t> &axes) {
  ncclComm *comm = nullptr;
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  const int64_t n = groupSize(axes);
  const size_t bytes = static_cast<size_t>(count) * elemBytes(dtype);
  LOOM_RETURN_IF_ERROR(watched(
      stream, [&] { return describe("all_to_all", count, dtype, axes); },
      [&] {
        LOOM_NCCL_CHECK(ncclGroupStart());
        for (int64_t j = 0; j < n; ++j) {
          const auto *src = static_cast<const uint8_t *>(in) + j * bytes;
          auto *dst = static_cast<uint8_t *>(out) + j * bytes;
          ncclResult_t r = ncclSend(src, static_cast<size_t>(count), type,
                                    static_cast<int>(j), comm, stream);
          if (r == ncclSuccess)
            r = ncclRecv(dst, static_cast<size_t>(count), type,
                         static_cast<int>(j), comm, stream);
          if (r != ncclSuccess) {
            ncclGroupEnd();
            LOOM_NCCL_CHECK(r);
          }
        }
        LOOM_NCCL_CHECK(ncclGroupEnd());
        return Status::success();
      }));
  return endOnComputeStream();
}

Status NcclCommunicator::doAllReduceAmong(void *buf, int64_t count,
                                          program::DType dtype,
                                          program::Reduction op,
                                          const std::vector<int> &ranks,
                                          size_t self) {
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  const size_t bytes = static_cast<size_t>(count) * elemBytes(dtype);
  const int64_t n = static_cast<int64_t>(ranks.size());
  if (bytes == 0 || n == 1)
    return Status::success();
  // 1. After the compute work so far: this rank's values into its block of
  //    a stream-ordered device buffer of every member's values, 2. the
  //    others' blocks from them (one NCCL group: no ordering deadlock),
  //    3. the member-order reduction back into `buf`, 4. the compute stream
  //    waits for it.
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  uint8_t *all = nullptr;
  LOOM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&all),
                                  bytes * static_cast<size_t>(n), stream));
  LOOM_CUDA_CHECK(cudaMemcpyAsync(all + self * bytes, buf, bytes,
                                  cudaMemcpyDeviceToDevice, stream));
  LOOM_RETURN_IF_ERROR(watched(
      stream,
      [&] {
        std::string members;
        for (int r : ranks)
          members += (members.empty() ? "" : ",") + std::to_string(r);
        return "all_reduce of " + std::to_string(count) + " " +
               program::EnumNameDType(dtype) + " among world ranks " + members;
      },
      [&] {
        LOOM_NCCL_CHECK(ncclGroupStart());
        for (size_t k = 0; k < ranks.size(); ++k) {
          if (k == self)
            continue;
          LOOM_NCCL_CHECK(ncclSend(buf, static_cast<size_t>(count), type,
                                   ranks[k], world, stream));
          LOOM_NCCL_CHECK(ncclRecv(all + k * bytes, static_cast<size_t>(count),
                                   type, ranks[k], world, stream));
        }
        LOOM_NCCL_CHECK(ncclGroupEnd());
        return Status::success();
      }));
  LOOM_RETURN_IF_ERROR(reduceMembers(
      buf, all, n, count, dtype == program::DType::BF16, op, stream));
  LOOM_CUDA_CHECK(cudaFreeAsync(all, stream));
  return endOnComputeStream();
}

Status NcclCommunicator::doSend(const void *buf, int64_t count,
                                program::DType dtype, int peer, int64_t) {
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  P2pLane &lane = laneFor(rank(), peer);
  // 1. The message is copied on the compute stream (which then goes on
  //    without waiting for the send, as MPI's buffered send lets the CPU
  //    backend go on), 2. sent from the copy on the lane, 3. the copy is
  //    freed in the lane's order (stream-ordered allocator).
  const size_t bytes = static_cast<size_t>(count) * elemBytes(dtype);
  void *copy = nullptr;
  if (bytes > 0) {
    LOOM_CUDA_CHECK(cudaMallocAsync(&copy, bytes, compute));
    LOOM_CUDA_CHECK(
        cudaMemcpyAsync(copy, buf, bytes, cudaMemcpyDeviceToDevice, compute));
  }
  if (peer == rank()) {
    // To itself: the copy is the message, handed over by doRecv.
    selfMessages.emplace_back(copy, bytes);
    return Status::success();
  }
  LOOM_CUDA_CHECK(cudaEventRecord(computeDone, compute));
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(lane.stream, computeDone, 0));
  LOOM_RETURN_IF_ERROR(watched(
      lane.stream,
      [&] {
        return "send of " + std::to_string(count) + " " +
               program::EnumNameDType(dtype) + " to world rank " +
               std::to_string(peer);
      },
      [&] {
        LOOM_NCCL_CHECK(ncclSend(copy ? copy : buf, static_cast<size_t>(count),
                                 type, peer, lane.comm, lane.stream));
        return Status::success();
      }));
  if (copy)
    LOOM_CUDA_CHECK(cudaFreeAsync(copy, lane.stream));
  return Status::success();
}

Status NcclCommunicator::doRecv(void *buf, int64_t count, program::DType dtype,
                                int peer, int64_t) {
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  if (peer == rank()) {
    LOOM_CHECK(!selfMessages.empty(),
               "recv from this rank itself with no matching send (it would "
               "wait forever)");
    const auto [message, bytes] = selfMessages.front();
    selfMessages.pop_front();
    const size_t want = static_cast<size_t>(count) * elemBytes(dtype);
    LOOM_CHECK(bytes == want, "recv from this rank itself expects "
                                  << want << " bytes but the send had "
                                  << bytes);
    if (message) {
      LOOM_CUDA_CHECK(cudaMemcpyAsync(buf, message, bytes,
                                      cudaMemcpyDeviceToDevice, compute));
      LOOM_CUDA_CHECK(cudaFreeAsync(message, compute));
    }
    return Status::success();
  }
  // The sender's lane: a message from a lower rank travels up.
  P2pLane &lane = laneFor(peer, rank());
  // The buffer's earlier readers and writers first; compute then waits for
  // the message.
  LOOM_CUDA_CHECK(cudaEventRecord(computeDone, compute));
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(lane.stream, computeDone, 0));
  LOOM_RETURN_IF_ERROR(watched(
      lane.stream,
      [&] {
        return "recv of " + std::to_string(count) + " " +
               program::EnumNameDType(dtype) + " from world rank " +
               std::to_string(peer);
      },
      [&] {
        LOOM_NCCL_CHECK(ncclRecv(buf, static_cast<size_t>(count), type, peer,
                                 lane.comm, lane.stream));
        return Status::success();
      }));
  LOOM_CUDA_CHECK(cudaEventRecord(lane.done, lane.stream));
  LOOM_CUDA_CHECK(cudaStreamWaitEvent(compute, lane.done, 0));
  return Status::success();
}

Status NcclCommunicator::doFlush() {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (P2pLane *lane : {&up, &down})
    LOOM_CUDA_CHECK(cudaStreamSynchronize(lane->stream));
  return Status::success();
}

Status NcclCommunicator::doBarrier() {
  int32_t *one = nullptr;
  LOOM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&one),
                                  sizeof(int32_t), stream));
  LOOM_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(int32_t), stream));
  LOOM_RETURN_IF_ERROR(watched(
      stream, [] { return "barrier (an all_reduce over the world)"; },
      [&] {
        LOOM_NCCL_CHECK(
            ncclAllReduce(one, one, 1, ncclInt32, ncclSum, world, stream));
        return Status::success();
      }));
  LOOM_CUDA_CHECK(cudaFreeAsync(one, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// World
//===----------------------------------------------------------------------===//

Status createNcclWorldCommunicator(const Communicator &bootstrap,
                                   cudaStream_t computeStream,
                                   std::unique_ptr<NcclCommunicator> &out,
                                   double timeoutSeconds) {
  LOOM_RETURN_IF_ERROR(loadNccl());
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (bootstrap.rank() == 0)
    LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
  if (bootstrap.size() > 1) {
#ifdef LOOM_HAVE_MPI
    // 1. Rank 0's id to every rank (the MPI world of the bootstrap).
    LOOM_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD) ==
                   MPI_SUCCESS,
               "MPI_Bcast of the ncclUniqueId failed");
#else
    LOOM_ERROR("a " << bootstrap.size()
                    << "-rank NCCL job needs MPI to share the ncclUniqueId; "
                       "this runtime was built without MPI");
#endif
  }
  return NcclCommunicator::create(bootstrap.rank(), bootstrap.size(), &id,
                                  computeStream, timeoutSeconds, out);
}

Status createNcclFileCommunicator(int rank, int size, const std::string &idFile,
                                  double idTimeoutSeconds,
                                  cudaStream_t computeStream,
                                  std::unique_ptr<NcclCommunicator> &out,
                                  double timeoutSeconds) {
  LOOM_CHECK(size >= 1 && rank >= 0 && rank < size,
             "rank " << rank << " of " << size
                     << ": LOOM_RANK must be in [0, LOOM_WORLD_SIZE)");
  LOOM_CHECK(!idFile.empty(), "the ranks of a " << size
                                                << "-rank job without mpirun "
                                                   "share the ncclUniqueId "
                                                   "through a file: set "
                                                   "LOOM_NCCL_ID_FILE to a "
                                                   "fresh path for the job");
  LOOM_RETURN_IF_ERROR(loadNccl());
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) {
    // 1. Rank 0 writes the id where the others look, atomically.
    LOOM_NCCL_CHECK(ncclGetUniqueId(&id));
    const std::string tmp = idFile + ".tmp" + std::to_string(::getpid());
    std::FILE *f = std::fopen(tmp.c_str(), "wb");
    LOOM_CHECK(f, "cannot create '" << tmp << "' (LOOM_NCCL_ID_FILE's "
                                    << "directory): " << std::strerror(errno));
    const bool wrote = std::fwrite(&id, sizeof(id), 1, f) == 1;
    const bool closed = std::fclose(f) == 0;
    LOOM_CHECK(wrote && closed && std::rename(tmp.c_str(), idFile.c_str()) == 0,
               "cannot write the ncclUniqueId to '" << idFile
                                                    << "': "
                                                    << std::strerror(errno));
  } else {
    // 2. The others wait for the file and read it.
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      if (std::FILE *f = std::fopen(idFile.c_str(), "rb")) {
        const bool read = std::fread(&id, sizeof(id), 1, f) == 1;
        std::fclose(f);
        LOOM_CHECK(read, "'" << idFile << "' does not hold a "
                             << sizeof(id) << "-byte ncclUniqueId");
        break;
      }
      const double waited = std::chrono::duration<double>(
                                std::chrono::steady_clock::now() - start)
                                .count();
      LOOM_CHECK(waited < idTimeoutSeconds,
                 "rank " << rank << " waited " << idTimeoutSeconds
                         << " s for rank 0's ncclUniqueId in '" << idFile
                         << "'; start rank 0 (LOOM_RANK=0) with the same "
                            "LOOM_NCCL_ID_FILE and LOOM_WORLD_SIZE");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  return NcclCommunicator::create(rank, size, &id, computeStream,
                                  timeoutSeconds, out);
}

} // namespace loom::cuda
