//===- comm_nccl.cpp - The Communicator over NCCL -------------------------===//
#include "runtime/cuda/comm_nccl.h"

#include "runtime/cuda/check.h"

#include <cstdlib>
#include <cstring>
#include <nccl.h>
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

Status NcclCommunicator::create(int rank, int size, const void *uniqueId,
                                cudaStream_t computeStream,
                                std::unique_ptr<NcclCommunicator> &out) {
  std::unique_ptr<NcclCommunicator> c(new NcclCommunicator(rank, size));
  c->compute = computeStream;
  LOOM_CUDA_CHECK(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  LOOM_CUDA_CHECK(
      cudaEventCreateWithFlags(&c->computeDone, cudaEventDisableTiming));
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&c->commDone, cudaEventDisableTiming));
  ncclUniqueId id;
  std::memcpy(&id, uniqueId, sizeof(id));
  ncclComm_t comm = nullptr;
  LOOM_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
  c->world = comm;
  out = std::move(c);
  return Status::success();
}

NcclCommunicator::~NcclCommunicator() {
  if (stream)
    cudaStreamSynchronize(stream);
  meshChanged();
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
  if (world)
    ncclCommAbort(world);
  world = nullptr;
  std::_Exit(code);
}

void NcclCommunicator::meshChanged() {
  for (auto &[mask, comm] : groups)
    ncclCommDestroy(comm);
  groups.clear();
}

Status NcclCommunicator::group(const std::vector<uint32_t> &axes,
                               ncclComm *&comm) {
  const uint64_t mask = axesMask(axes);
  // Every axis of the mesh: the world itself.
  if (groupSize(axes) == size()) {
    comm = world;
    return Status::success();
  }
  if (auto it = groups.find(mask); it != groups.end()) {
    comm = it->second;
    return Status::success();
  }
  // 1. Color: this rank's coordinates on the other axes (one group each);
  //    key: the group rank, so NCCL ranks are group ranks.
  const std::vector<int64_t> c = coords();
  int64_t color = 0;
  for (size_t a = 0; a < meshAxes.size(); ++a)
    if (!(mask & (uint64_t(1) << a)))
      color = color * meshAxes[a].size + c[a];
  ncclComm_t split = nullptr;
  // 2. Collective over the world: every rank asks for the same axis sets in
  //    the same order (the program's instruction order).
  LOOM_NCCL_CHECK(ncclCommSplit(world, static_cast<int>(color),
                                static_cast<int>(groupRank(axes)), &split,
                                nullptr));
  groups[mask] = split;
  comm = split;
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

Status NcclCommunicator::doStartAllReduce(void *buf, int64_t count,
                                          program::DType dtype,
                                          program::Reduction op,
                                          const std::vector<uint32_t> &axes,
                                          Ticket &ticket) {
  ncclComm *comm = nullptr;
  ncclDataType_t type;
  ncclRedOp_t red;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(ncclOpOf(op, red));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  LOOM_NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(count), type,
                                red, comm, stream));
  return startTicket(ticket);
}

Status NcclCommunicator::doStartAllGather(const void *in, void *out,
                                          int64_t count, program::DType dtype,
                                          const std::vector<uint32_t> &axes,
                                          Ticket &ticket) {
  ncclComm *comm = nullptr;
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  LOOM_NCCL_CHECK(ncclAllGather(in, out, static_cast<size_t>(count), type,
                                comm, stream));
  return startTicket(ticket);
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
  ncclComm *comm = nullptr;
  ncclDataType_t type;
  ncclRedOp_t red;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(ncclOpOf(op, red));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  LOOM_NCCL_CHECK(ncclReduceScatter(in, out, static_cast<size_t>(count), type,
                                    red, comm, stream));
  return endOnComputeStream();
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
  LOOM_NCCL_CHECK(ncclGroupStart());
  for (int64_t j = 0; j < n; ++j) {
    const auto *src = static_cast<const uint8_t *>(in) + j * bytes;
    auto *dst = static_cast<uint8_t *>(out) + j * bytes;
    ncclResult_t r = ncclSend(src, static_cast<size_t>(count), type,
                              static_cast<int>(j), comm, stream);
    if (r == ncclSuccess)
      r = ncclRecv(dst, static_cast<size_t>(count), type, static_cast<int>(j),
                   comm, stream);
    if (r != ncclSuccess) {
      ncclGroupEnd();
      LOOM_NCCL_CHECK(r);
    }
  }
  LOOM_NCCL_CHECK(ncclGroupEnd());
  return endOnComputeStream();
}

Status NcclCommunicator::doSend(const void *buf, int64_t count,
                                program::DType dtype, int peer, int64_t) {
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  LOOM_NCCL_CHECK(
      ncclSend(buf, static_cast<size_t>(count), type, peer, world, stream));
  return endOnComputeStream();
}

Status NcclCommunicator::doRecv(void *buf, int64_t count, program::DType dtype,
                                int peer, int64_t) {
  ncclDataType_t type;
  LOOM_RETURN_IF_ERROR(ncclTypeOf(dtype, type));
  LOOM_RETURN_IF_ERROR(beginOnCommStream());
  LOOM_NCCL_CHECK(
      ncclRecv(buf, static_cast<size_t>(count), type, peer, world, stream));
  return endOnComputeStream();
}

Status NcclCommunicator::doFlush() {
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::success();
}

Status NcclCommunicator::doBarrier() {
  int32_t *one = nullptr;
  LOOM_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void **>(&one),
                                  sizeof(int32_t), stream));
  LOOM_CUDA_CHECK(cudaMemsetAsync(one, 0, sizeof(int32_t), stream));
  LOOM_NCCL_CHECK(ncclAllReduce(one, one, 1, ncclInt32, ncclSum, world,
                                stream));
  LOOM_CUDA_CHECK(cudaFreeAsync(one, stream));
  LOOM_CUDA_CHECK(cudaStreamSynchronize(stream));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// World
//===----------------------------------------------------------------------===//

Status createNcclWorldCommunicator(const Communicator &bootstrap,
                                   cudaStream_t computeStream,
                                   std::unique_ptr<NcclCommunicator> &out) {
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
                                  computeStream, out);
}

} // namespace loom::cuda
