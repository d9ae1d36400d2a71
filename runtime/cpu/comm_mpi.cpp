//===- comm_mpi.cpp - Communicator over MPI ---------------------*- C++ -*-===//
//
// F32 and I32 reductions are MPI's own. BF16 (mixed precision) has no MPI
// type or reduction, and summing in bf16 would round after every addition,
// so a BF16 reduction runs as the two halves of a ring all-reduce with the
// arithmetic in the middle: an all-to-all gives member j every member's
// block j (bf16 on the wire), member j reduces them in fp32 in group-rank
// order and rounds once to nearest even, and an all-gather (all-reduce) or
// nothing (reduce-scatter) returns the reduced blocks. Each block is reduced
// by one rank only, so every rank gets the same bits, and each rank sends
// 2(n-1)/n (all-reduce) or (n-1)/n (reduce-scatter) of the bf16 buffer: the
// ring volumes the communicator counts. Gathers, all-to-all and send / recv
// move the 2-byte elements as they are.
//
//===----------------------------------------------------------------------===//
#include "runtime/cpu/comm_mpi.h"

#include "runtime/core/bfloat16.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace loom {

using program::DType;
using program::Reduction;

namespace {

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS)
    return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<size_t>(len));
}

#define MPI_CHECK(call, what)                                                  \
  do {                                                                         \
    const int mpiRc_ = (call);                                                 \
    LOOM_CHECK(mpiRc_ == MPI_SUCCESS, what << ": " << mpiError(mpiRc_));       \
  } while (0)

MPI_Datatype mpiType(DType dtype) {
  switch (dtype) {
  case DType::I32:
    return MPI_INT32_T;
  case DType::BF16:
    return MPI_UINT16_T; // moved as raw 2-byte elements, never reduced by MPI
  default:
    return MPI_FLOAT;
  }
}

Status mpiOp(Reduction op, DType dtype, MPI_Op &out) {
  LOOM_CHECK(dtype != DType::BF16,
             "internal: a BF16 reduction reached MPI's own reductions");
  switch (op) {
  case Reduction::Sum:
    out = MPI_SUM;
    return Status::success();
  case Reduction::Max:
    out = MPI_MAX;
    return Status::success();
  case Reduction::Min:
    out = MPI_MIN;
    return Status::success();
  case Reduction::Avg:
    LOOM_CHECK(dtype == DType::F32, "Avg reduction needs F32 data");
    out = MPI_SUM;
    return Status::success();
  }
  LOOM_ERROR("unknown reduction " << static_cast<int>(op));
}

Status intCount(int64_t count, int &out) {
  LOOM_CHECK(count >= 0 && count <= INT_MAX,
             "message of " << count << " elements exceeds MPI's int count");
  out = static_cast<int>(count);
  return Status::success();
}

void divide(void *buf, int64_t count, int64_t n) {
  float *f = static_cast<float *>(buf);
  const float inv = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < count; ++i)
    f[i] *= inv;
}

/// First element of block j when `count` elements are split into n blocks
/// (sizes differ by at most one; `count` need not be divisible by n).
int64_t blockStart(int64_t count, int64_t n, int64_t j) {
  return count * j / n;
}

/// out[i] = the reduction of the n contributions in[r * len + i] (r in
/// group-rank order), computed in fp32 and rounded once to bf16.
void reduceBF16(uint16_t *out, const uint16_t *in, int64_t len, int64_t n,
                Reduction op) {
  const float inv = 1.0f / static_cast<float>(n);
  for (int64_t i = 0; i < len; ++i) {
    float acc = bf16ToFloat(in[i]);
    for (int64_t r = 1; r < n; ++r) {
      const float v = bf16ToFloat(in[r * len + i]);
      acc = op == Reduction::Max   ? std::max(acc, v)
            : op == Reduction::Min ? std::min(acc, v)
                                   : acc + v;
    }
    out[i] = floatToBF16(op == Reduction::Avg ? acc * inv : acc);
  }
}

bool finalizeRegistered = false;
void finalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized)
    MPI_Finalize();
}

} // namespace

Status MpiCommunicator::createWorld(int *argc, char ***argv,
                                    std::unique_ptr<Communicator> &out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_CHECK(MPI_Init(argc, argv), "MPI_Init failed");
    if (!finalizeRegistered) {
      finalizeRegistered = true;
      std::atexit(finalizeAtExit);
    }
  }
  return create(MPI_COMM_WORLD, out);
}

Status MpiCommunicator::create(MPI_Comm comm,
                               std::unique_ptr<Communicator> &out) {
  MPI_Comm dup;
  MPI_CHECK(MPI_Comm_dup(comm, &dup), "MPI_Comm_dup failed");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  auto *c = new MpiCommunicator(dup, rank, size);
  const char *check = std::getenv("LOOM_CHECK_P2P_ORDER");
  c->checkP2POrder = check && std::string(check) == "1";
  out.reset(c);
  return Status::success();
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  (void)doFlush();
  freeGroups();
  MPI_Comm_free(&world);
}

void MpiCommunicator::abort(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  MPI_Abort(world, code);
  std::_Exit(code);
}

void MpiCommunicator::freeGroups() {
  for (auto &[mask, comm] : groups)
    MPI_Comm_free(&comm);
  groups.clear();
}

void MpiCommunicator::meshChanged() {
  freeGroups();
  // Every group now, while all ranks are here: MPI_Comm_split is collective
  // over the whole world, and later the ranks of different pipeline stages
  // reach their first collective on a group at different times (a stage
  // waiting in a receive would never join the split).
  const size_t n = meshAxes.size();
  if (n > 6)
    return; // many axes: groups are made when first used
  for (uint64_t mask = 1; mask < (uint64_t(1) << n); ++mask) {
    std::vector<uint32_t> axes;
    for (uint32_t a = 0; a < n; ++a)
      if (mask >> a & 1)
        axes.push_back(a);
    MPI_Comm comm;
    if (!group(axes, comm).ok())
      return; // reported again when the group is used
  }
}

Status MpiCommunicator::group(const std::vector<uint32_t> &axes,
                              MPI_Comm &out) {
  for (uint32_t a : axes)
    LOOM_CHECK(a < meshAxes.size(), "mesh axis " << a << " is out of range ("
                                                 << meshAxes.size()
                                                 << " axes)");
  const uint64_t mask = axesMask(axes);
  auto it = groups.find(mask);
  if (it != groups.end()) {
    out = it->second;
    return Status::success();
  }
  // Color: the coordinates on the other axes; key: the group rank.
  const std::vector<int64_t> c = coords();
  int64_t color = 0;
  for (size_t a = 0; a < meshAxes.size(); ++a)
    if (!(mask >> a & 1))
      color = color * meshAxes[a].size + c[a];
  MPI_Comm comm;
  MPI_CHECK(MPI_Comm_split(world, static_cast<int>(color),
                           static_cast<int>(groupRank(axes)), &comm),
            "MPI_Comm_split failed");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  groups[mask] = comm;
  out = comm;
  return Status::success();
}

Status MpiCommunicator::reductionArgs(const std::vector<uint32_t> &axes,
                                      Reduction op, DType dtype, int64_t count,
                                      MPI_Comm &comm, MPI_Op &mop, int &n) {
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  LOOM_RETURN_IF_ERROR(mpiOp(op, dtype, mop));
  return intCount(count, n);
}

Status MpiCommunicator::startBF16AllReduce(
    void *buf, int64_t count, Reduction op, const std::vector<uint32_t> &axes,
    bool nonblocking, std::shared_ptr<BF16AllReduce> &out) {
  auto ar = std::make_shared<BF16AllReduce>();
  LOOM_RETURN_IF_ERROR(group(axes, ar->comm));
  int checked = 0;
  LOOM_RETURN_IF_ERROR(intCount(count, checked));
  const int64_t n = groupSize(axes), me = groupRank(axes);
  ar->buf = static_cast<uint16_t *>(buf);
  ar->count = count;
  ar->groupSize = n;
  ar->op = op;
  ar->sendCounts.resize(n);
  ar->sendDispls.resize(n);
  for (int64_t j = 0; j < n; ++j) {
    ar->sendDispls[j] = static_cast<int>(blockStart(count, n, j));
    ar->sendCounts[j] =
        static_cast<int>(blockStart(count, n, j + 1) - ar->sendDispls[j]);
  }
  // 1. Member j receives every member's block j.
  const int mine = ar->sendCounts[me];
  ar->received.resize(static_cast<size_t>(mine) * n);
  ar->recvCounts.assign(n, mine);
  ar->recvDispls.resize(n);
  for (int64_t r = 0; r < n; ++r)
    ar->recvDispls[r] = static_cast<int>(r * mine);
  if (nonblocking)
    MPI_CHECK(MPI_Ialltoallv(buf, ar->sendCounts.data(), ar->sendDispls.data(),
                             MPI_UINT16_T, ar->received.data(),
                             ar->recvCounts.data(), ar->recvDispls.data(),
                             MPI_UINT16_T, ar->comm, &ar->request),
              "MPI_Ialltoallv (bf16 all-reduce) failed");
  else
    MPI_CHECK(MPI_Alltoallv(buf, ar->sendCounts.data(), ar->sendDispls.data(),
                            MPI_UINT16_T, ar->received.data(),
                            ar->recvCounts.data(), ar->recvDispls.data(),
                            MPI_UINT16_T, ar->comm),
              "MPI_Alltoallv (bf16 all-reduce) failed");
  out = std::move(ar);
  return Status::success();
}

Status MpiCommunicator::finishBF16AllReduce(BF16AllReduce &ar) {
  // 2. Reduce this member's block in fp32, round once; 3. gather the
  //    reduced blocks in place.
  int me = 0;
  MPI_Comm_rank(ar.comm, &me);
  reduceBF16(ar.buf + ar.sendDispls[me], ar.received.data(), ar.sendCounts[me],
             ar.groupSize, ar.op);
  MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, ar.buf,
                           ar.sendCounts.data(), ar.sendDispls.data(),
                           MPI_UINT16_T, ar.comm),
            "MPI_Allgatherv (bf16 all-reduce) failed");
  return Status::success();
}

Status MpiCommunicator::doAllReduce(void *buf, int64_t count, DType dtype,
                                    Reduction op,
                                    const std::vector<uint32_t> &axes) {
  if (dtype == DType::BF16) {
    std::shared_ptr<BF16AllReduce> ar;
    LOOM_RETURN_IF_ERROR(startBF16AllReduce(buf, count, op, axes,
                                            /*nonblocking=*/false, ar));
    return finishBF16AllReduce(*ar);
  }
  MPI_Comm comm;
  MPI_Op mop;
  int n = 0;
  LOOM_RETURN_IF_ERROR(reductionArgs(axes, op, dtype, count, comm, mop, n));
  MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, n, mpiType(dtype), mop, comm),
            "MPI_Allreduce failed");
  if (op == Reduction::Avg)
    divide(buf, count, groupSize(axes));
  return Status::success();
}

Status MpiCommunicator::doStartAllReduce(void *buf, int64_t count,
                                         DType dtype, Reduction op,
                                         const std::vector<uint32_t> &axes,
                                         Ticket &ticket) {
  if (dtype == DType::BF16) {
    // The all-to-all half runs in the background; the reduction and the
    // gather happen at completion (the same program point on every rank,
    // so MPI sees the group's collectives in one order).
    PendingCollective pending = pendingOver(count, axes);
    LOOM_RETURN_IF_ERROR(startBF16AllReduce(buf, count, op, axes,
                                            /*nonblocking=*/true,
                                            pending.bf16));
    pending.request = pending.bf16->request;
    ticket = nextTicket++;
    started.emplace(ticket, pending);
    return Status::success();
  }
  MPI_Comm comm;
  MPI_Op mop;
  int n = 0;
  LOOM_RETURN_IF_ERROR(reductionArgs(axes, op, dtype, count, comm, mop, n));
  PendingCollective pending = pendingOver(count, axes);
  pending.averageBuf = op == Reduction::Avg ? buf : nullptr;
  MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, n, mpiType(dtype), mop, comm,
                           &pending.request),
            "MPI_Iallreduce failed");
  ticket = nextTicket++;
  started.emplace(ticket, pending);
  return Status::success();
}

Status MpiCommunicator::doStartAllGather(const void *in, void *out,
                                         int64_t count, DType dtype,
                                         const std::vector<uint32_t> &axes,
                                         Ticket &ticket) {
  MPI_Comm comm;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  int n = 0;
  LOOM_RETURN_IF_ERROR(intCount(count, n));
  PendingCollective pending = pendingOver(count, axes);
  MPI_CHECK(MPI_Iallgather(in, n, mpiType(dtype), out, n, mpiType(dtype),
                           comm, &pending.request),
            "MPI_Iallgather failed");
  ticket = nextTicket++;
  started.emplace(ticket, pending);
  return Status::success();
}

Status MpiCommunicator::doStartReduceScatter(const void *in, void *out,
                                             int64_t count, DType dtype,
                                             Reduction op,
                                             const std::vector<uint32_t> &axes,
                                             Ticket &ticket) {
  PendingCollective pending = pendingOver(count, axes);
  if (dtype == DType::BF16) {
    // Member j receives everyone's block j (an all-to-all, in the
    // background) and at completion reduces them in fp32, rounding once.
    MPI_Comm comm;
    LOOM_RETURN_IF_ERROR(group(axes, comm));
    int c = 0;
    LOOM_RETURN_IF_ERROR(intCount(count, c));
    const int64_t n = groupSize(axes);
    auto received =
        std::make_shared<std::vector<uint16_t>>(static_cast<size_t>(count * n));
    MPI_CHECK(MPI_Ialltoall(in, c, MPI_UINT16_T, received->data(), c,
                            MPI_UINT16_T, comm, &pending.request),
              "MPI_Ialltoall (bf16 reduce-scatter) failed");
    pending.finish = [out, received, count, n, op]() {
      reduceBF16(static_cast<uint16_t *>(out), received->data(), count, n, op);
    };
  } else {
    MPI_Comm comm;
    MPI_Op mop;
    int n = 0;
    LOOM_RETURN_IF_ERROR(reductionArgs(axes, op, dtype, count, comm, mop, n));
    MPI_CHECK(MPI_Ireduce_scatter_block(in, out, n, mpiType(dtype), mop, comm,
                                        &pending.request),
              "MPI_Ireduce_scatter_block failed");
    if (op == Reduction::Avg)
      pending.averageBuf = out;
  }
  ticket = nextTicket++;
  started.emplace(ticket, std::move(pending));
  return Status::success();
}

Status MpiCommunicator::doComplete(Ticket ticket) {
  auto it = started.find(ticket);
  LOOM_CHECK(it != started.end(),
             "no collective in flight with ticket " << ticket);
  PendingCollective pending = it->second;
  started.erase(it);
  MPI_CHECK(MPI_Wait(&pending.request, MPI_STATUS_IGNORE),
            "a started collective failed to complete");
  if (pending.finish)
    pending.finish();
  if (pending.averageBuf)
    divide(pending.averageBuf, pending.count, pending.groupSize);
  if (pending.bf16)
    return finishBF16AllReduce(*pending.bf16);
  return Status::success();
}

void MpiCommunicator::doProgress() {
  for (auto &[ticket, pending] : started) {
    int done = 0;
    // Completion is taken by doComplete (MPI_Wait on a finished request
    // returns at once); this only drives the progress engine.
    if (pending.request != MPI_REQUEST_NULL)
      MPI_Request_get_status(pending.request, &done, MPI_STATUS_IGNORE);
  }
}

Status MpiCommunicator::doAllGather(const void *in, void *out, int64_t count,
                                    DType dtype,
                                    const std::vector<uint32_t> &axes) {
  MPI_Comm comm;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  int n = 0;
  LOOM_RETURN_IF_ERROR(intCount(count, n));
  MPI_CHECK(MPI_Allgather(in, n, mpiType(dtype), out, n, mpiType(dtype), comm),
            "MPI_Allgather failed");
  return Status::success();
}

Status MpiCommunicator::doReduceScatter(const void *in, void *out,
                                        int64_t count, DType dtype,
                                        Reduction op,
                                        const std::vector<uint32_t> &axes) {
  // Started and waited for at once: one implementation of both.
  Ticket t = -1;
  LOOM_RETURN_IF_ERROR(
      doStartReduceScatter(in, out, count, dtype, op, axes, t));
  return doComplete(t);
}

Status MpiCommunicator::doAllToAll(const void *in, void *out, int64_t count,
                                   DType dtype,
                                   const std::vector<uint32_t> &axes) {
  MPI_Comm comm;
  LOOM_RETURN_IF_ERROR(group(axes, comm));
  int n = 0;
  LOOM_RETURN_IF_ERROR(intCount(count, n));
  MPI_CHECK(MPI_Alltoall(in, n, mpiType(dtype), out, n, mpiType(dtype), comm),
            "MPI_Alltoall failed");
  return Status::success();
}

Status MpiCommunicator::doSend(const void *buf, int64_t count, DType dtype,
                               int peer, int64_t tag) {
  int n = 0;
  const int64_t bytes = count * program::dtypeBytes(dtype);
  LOOM_RETURN_IF_ERROR(intCount(bytes, n));
  int *tagUb = nullptr, flag = 0;
  MPI_Comm_get_attr(world, MPI_TAG_UB, &tagUb, &flag);
  LOOM_CHECK(!flag || tag <= *tagUb,
             "send tag " << tag << " exceeds MPI_TAG_UB " << *tagUb);
  sends.emplace_back();
  PendingSend &p = sends.back();
  const uint8_t *src = static_cast<const uint8_t *>(buf);
  p.data.assign(src, src + bytes);
  MPI_CHECK(MPI_Isend(p.data.data(), n, MPI_BYTE, peer, static_cast<int>(tag),
                      world, &p.request),
            "MPI_Isend to rank " << peer << " (tag " << tag << ") failed");
  // Drop the sends that already completed.
  for (auto it = sends.begin(); it != sends.end();) {
    int done = 0;
    MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
    it = done ? sends.erase(it) : std::next(it);
  }
  return Status::success();
}

Status MpiCommunicator::doRecv(void *buf, int64_t count, DType dtype, int peer,
                               int64_t tag) {
  int n = 0;
  const int64_t bytes = count * program::dtypeBytes(dtype);
  LOOM_RETURN_IF_ERROR(intCount(bytes, n));
  MPI_Status st;
  if (checkP2POrder) {
    // The next message from `peer` in its send order (MPI never lets a
    // later message from one sender overtake an earlier one): what NCCL,
    // which matches by order alone, would deliver to this recv.
    MPI_CHECK(MPI_Probe(peer, MPI_ANY_TAG, world, &st),
              "MPI_Probe from rank " << peer << " failed");
    LOOM_CHECK(st.MPI_TAG == tag,
               "p2p order (LOOM_CHECK_P2P_ORDER): rank "
                   << worldRank << " receives tag " << tag << " from rank "
                   << peer << ", but that rank's next message to it has tag "
                   << st.MPI_TAG
                   << "; NCCL matches send/recv in issue order, so on GPUs "
                      "this recv would get the wrong message (the program's "
                      "send and recv orders differ between these ranks)");
  }
  MPI_CHECK(MPI_Recv(buf, n, MPI_BYTE, peer, static_cast<int>(tag), world, &st),
            "MPI_Recv from rank " << peer << " (tag " << tag << ") failed");
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  LOOM_CHECK(got == n, "recv from rank " << peer << " (tag " << tag
                                         << ") expected " << n
                                         << " bytes, got " << got);
  return Status::success();
}

Status MpiCommunicator::doFlush() {
  for (PendingSend &p : sends)
    MPI_CHECK(MPI_Wait(&p.request, MPI_STATUS_IGNORE), "MPI_Wait failed");
  sends.clear();
  return Status::success();
}

Status MpiCommunicator::doBarrier() {
  LOOM_RETURN_IF_ERROR(doFlush());
  MPI_CHECK(MPI_Barrier(world), "MPI_Barrier failed");
  return Status::success();
}

} // namespace loom
