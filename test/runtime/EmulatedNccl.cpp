//===- EmulatedNccl.cpp - The NCCL calls, over MPI on host memory ---------===//
//
// The NCCL calls runtime/cuda/comm_nccl.cpp makes, for loom-run-emulated
// and loom-cuda-emulation-tests (EmulatedCudaRuntime.cpp: "device" memory
// is host memory, so MPI moves it): comm_nccl.cpp's own logic (groups per
// set of mesh axes, the point-to-point lanes, tickets, the member-order
// all-reduce) runs as it is, several ranks under mpirun, one rank without.
//
//   - A communicator is an MPI communicator: ncclCommInitRank duplicates
//     MPI_COMM_WORLD (its size and rank must be the ones asked for),
//     ncclCommSplit is MPI_Comm_split. A world of one needs no MPI (every
//     collective is then a copy).
//   - Ranks started without mpirun (LOOM_RANK / LOOM_WORLD_SIZE, as `loom`
//     starts --backend cuda ranks) are each a world of one to MPI: they
//     connect over loopback TCP instead (EmulatedNcclSockets.h), through
//     the port rank 0's ncclGetUniqueId puts into the id, and their
//     collectives are messages between each pair of ranks, each rank
//     reducing every contribution in rank order (so all ranks hold the
//     same bits).
//   - Collectives run when called: the stream they were issued on has
//     nothing queued in an emulated device.
//   - ncclSend copies the message and returns (an MPI_Isend from the copy),
//     as a send on its own stream does not hold the host; ncclRecv returns
//     with the message (later kernels read it at once). Between
//     ncclGroupStart and ncclGroupEnd, sends and receives are posted
//     together at the end and completed there (no ordering deadlock, as
//     NCCL's groups promise). Messages match in issue order per peer and
//     communicator, NCCL's rule. A receive that nothing matches within
//     LOOM_EMULATED_NCCL_TIMEOUT seconds (120) ends the job with a message
//     (on a device it would hang).
//   - bf16 sums, maxima and minima reduce pairwise in fp32, rounded to bf16
//     (an MPI user operation); ncclAvg is the sum divided by the ranks.
//   - LOOM_EMULATED_NCCL_STALL=R:N makes world rank R stop responding at
//     its N-th collective or point-to-point call (it sleeps there for
//     good, as a hung peer would), for the tests of the other ranks'
//     watchdog (runtime/cuda/collective_watchdog.h).
//
//===----------------------------------------------------------------------===//
#include "EmulatedNcclSockets.h"
#include "runtime/core/bfloat16.h"
#include "runtime/cuda/cuda_libraries.h"

#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

/// What an emulated ncclComm_t points to.
struct ncclComm {
  MPI_Comm mpi = MPI_COMM_NULL; // MPI_COMM_NULL: a world of one, or sockets
  int rank = 0, size = 1;
  /// Ranks connected over sockets (no mpirun): this communicator's message
  /// channel, its members' world ranks by rank, and how many splits it has
  /// made (every member makes the same ones, so the children's channels
  /// agree).
  bool sockets = false;
  uint64_t channel = 0;
  std::vector<int> members;
  uint64_t splits = 0;
  /// Sends in flight: the request and the copy it sends from.
  struct Pending {
    MPI_Request request;
    std::unique_ptr<uint8_t[]> copy;
  };
  std::deque<Pending> sends;
};

namespace {

bool mpiRunning() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

size_t bytesOf(ncclDataType_t type) {
  switch (type) {
  case ncclFloat32:
  case ncclInt32:
    return 4;
  case ncclBfloat16:
    return 2;
  default:
    return 0;
  }
}

/// bf16 reductions: widen, combine, round to nearest even.
template <int Kind> void bf16Reduce(void *in, void *inout, int *len,
                                    MPI_Datatype *) {
  auto *a = static_cast<const uint16_t *>(in);
  auto *b = static_cast<uint16_t *>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = loom::bf16ToFloat(a[i]), y = loom::bf16ToFloat(b[i]);
    const float r = Kind == 0 ? x + y : Kind == 1 ? (x > y ? x : y)
                                                  : (x < y ? x : y);
    b[i] = loom::floatToBF16(r);
  }
}

/// The MPI datatype and operation of an NCCL type and reduction (ncclAvg
/// reduces as a sum; the caller divides).
bool mpiOf(ncclDataType_t type, ncclRedOp_t op, MPI_Datatype &dt,
           MPI_Op &mop) {
  static MPI_Op bf16Ops[3] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL};
  const int kind = op == ncclMax ? 1 : op == ncclMin ? 2 : 0;
  if (op != ncclSum && op != ncclAvg && op != ncclMax && op != ncclMin)
    return false;
  switch (type) {
  case ncclFloat32:
    dt = MPI_FLOAT;
    break;
  case ncclInt32:
    dt = MPI_INT32_T;
    break;
  case ncclBfloat16:
    dt = MPI_UINT16_T;
    if (bf16Ops[kind] == MPI_OP_NULL) {
      MPI_User_function *fn = kind == 0   ? &bf16Reduce<0>
                              : kind == 1 ? &bf16Reduce<1>
                                          : &bf16Reduce<2>;
      MPI_Op_create(fn, /*commute=*/1, &bf16Ops[kind]);
    }
    mop = bf16Ops[kind];
    return true;
  default:
    return false;
  }
  mop = kind == 0 ? MPI_SUM : kind == 1 ? MPI_MAX : MPI_MIN;
  return true;
}

/// ncclAvg: the sum over the ranks divided by their number.
void divide(void *buf, size_t count, ncclDataType_t type, int size) {
  if (type == ncclFloat32) {
    auto *f = static_cast<float *>(buf);
    for (size_t i = 0; i < count; ++i)
      f[i] /= static_cast<float>(size);
  } else if (type == ncclBfloat16) {
    auto *h = static_cast<uint16_t *>(buf);
    for (size_t i = 0; i < count; ++i)
      h[i] = loom::floatToBF16(loom::bf16ToFloat(h[i]) /
                               static_cast<float>(size));
  } else if (type == ncclInt32) {
    auto *n = static_cast<int32_t *>(buf);
    for (size_t i = 0; i < count; ++i)
      n[i] /= size;
  }
}

/// Completes every send of `comm` that has arrived (and, with `all`, every
/// one), releasing its copy.
void progressSends(ncclComm *comm, bool all) {
  while (!comm->sends.empty()) {
    int done = 0;
    if (all)
      MPI_Wait(&comm->sends.front().request, MPI_STATUS_IGNORE), done = 1;
    else
      MPI_Test(&comm->sends.front().request, &done, MPI_STATUS_IGNORE);
    if (!done)
      return;
    comm->sends.pop_front();
  }
}

/// Waits for `requests`; a wait past LOOM_EMULATED_NCCL_TIMEOUT seconds
/// (120 by default) is a hang on a device (a receive no send matches: a
/// different communicator, peer or order), so it ends the job with what
/// was waited for instead of hanging.
void waitAll(std::vector<MPI_Request> &requests, const char *what, int peer,
             const ncclComm *comm) {
  if (requests.empty())
    return;
  const char *env = std::getenv("LOOM_EMULATED_NCCL_TIMEOUT");
  const double timeout = env ? std::atof(env) : 120.0;
  const double start = MPI_Wtime();
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done,
                MPI_STATUSES_IGNORE);
    if (done)
      return;
    if (MPI_Wtime() - start > timeout) {
      std::fprintf(stderr,
                   "emulated NCCL: rank %d of a %d-rank communicator waited "
                   "%.0f s for %s (peer %d): no matching call on the same "
                   "communicator; on a device this hangs\n",
                   comm->rank, comm->size, timeout, what, peer);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// LOOM_EMULATED_NCCL_STALL=R:N: world rank R sleeps for good at its N-th
/// collective or point-to-point call (a grouped one counts at its
/// ncclGroupEnd). Malformed values end the process with a message.
void stallIfAsked() {
  static const std::pair<int, long> stall = [] {
    const char *env = std::getenv("LOOM_EMULATED_NCCL_STALL");
    if (!env || !*env)
      return std::pair<int, long>(-1, 0);
    int rank = -1;
    long call = 0;
    char extra = 0;
    if (std::sscanf(env, "%d:%ld%c", &rank, &call, &extra) != 2 || rank < 0 ||
        call < 1) {
      std::fprintf(stderr,
                   "emulated NCCL: LOOM_EMULATED_NCCL_STALL='%s' is not "
                   "RANK:CALL (a world rank and a call number from 1)\n",
                   env);
      std::exit(2);
    }
    return std::pair<int, long>(rank, call);
  }();
  static long calls = 0;
  if (stall.first < 0 || ++calls != stall.second)
    return;
  int rank = 0;
  if (loom::emulated_nccl::worldConnected())
    rank = loom::emulated_nccl::worldRank();
  else if (mpiRunning())
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  else
    return;
  if (rank != stall.first)
    return;
  std::fprintf(stderr,
               "emulated NCCL: world rank %d stops responding at its NCCL "
               "call %ld (LOOM_EMULATED_NCCL_STALL)\n",
               rank, calls);
  std::fflush(stderr);
  for (;;)
    std::this_thread::sleep_for(std::chrono::seconds(1));
}

/// A point-to-point call of a group, posted at ncclGroupEnd.
struct GroupedCall {
  bool send;
  const void *sendBuf;
  void *recvBuf;
  size_t bytes;
  int peer;
  ncclComm *comm;
};
int groupDepth = 0;
std::vector<GroupedCall> grouped;

/// A communicator with no other rank: every collective is a local copy.
bool alone(const ncclComm *comm) { return comm->size == 1; }

/// A world of one without MPI or sockets: a rank's point-to-point calls
/// can only be to itself.
bool selfOnly(const ncclComm *comm) {
  return comm->mpi == MPI_COMM_NULL && !comm->sockets;
}

/// What an id says: the marker of ranks under mpirun, or of ranks joined
/// over sockets followed by rank 0's port.
constexpr char kMpiId[] = "loom-emulated";
constexpr char kSocketsId[] = "loom-emulated-tcp";

int mpiWorldSize() {
  int size = 1;
  if (mpiRunning())
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

/// a op= b elementwise, in the type's arithmetic (bf16 in fp32, rounded).
void reduceInto(void *a, const void *b, size_t count, ncclDataType_t type,
                ncclRedOp_t op) {
  auto combine = [op](auto x, auto y) {
    return op == ncclMax   ? (x > y ? x : y)
           : op == ncclMin ? (x < y ? x : y)
                           : x + y;
  };
  if (type == ncclFloat32) {
    auto *x = static_cast<float *>(a);
    const auto *y = static_cast<const float *>(b);
    for (size_t i = 0; i < count; ++i)
      x[i] = combine(x[i], y[i]);
  } else if (type == ncclInt32) {
    auto *x = static_cast<int32_t *>(a);
    const auto *y = static_cast<const int32_t *>(b);
    for (size_t i = 0; i < count; ++i)
      x[i] = combine(x[i], y[i]);
  } else if (type == ncclBfloat16) {
    auto *x = static_cast<uint16_t *>(a);
    const auto *y = static_cast<const uint16_t *>(b);
    for (size_t i = 0; i < count; ++i)
      x[i] = loom::floatToBF16(
          combine(loom::bf16ToFloat(x[i]), loom::bf16ToFloat(y[i])));
  }
}

/// Over sockets: `out` = the members' `bytes`-long blocks reduced in rank
/// order, where member m's block is `blockOf(m)` of its send buffer (each
/// member sends its others their blocks first: the sends complete while
/// the peers send too, EmulatedNcclSockets.h).
template <typename BlockOf>
void reduceOverSockets(ncclComm *comm, const void *sendbuff, void *out,
                       size_t count, ncclDataType_t type, ncclRedOp_t op,
                       BlockOf blockOf, const char *what) {
  using namespace loom::emulated_nccl;
  const size_t bytes = count * bytesOf(type);
  const auto *send = static_cast<const uint8_t *>(sendbuff);
  for (int m = 0; m < comm->size; ++m)
    if (m != comm->rank)
      sendTo(comm->members[m], comm->channel, send + blockOf(m) * bytes, bytes);
  std::vector<uint8_t> sum(bytes), part(bytes);
  for (int m = 0; m < comm->size; ++m) {
    uint8_t *into = m == 0 ? sum.data() : part.data();
    if (m == comm->rank)
      std::memcpy(into, send + blockOf(m) * bytes, bytes);
    else
      receiveFrom(comm->members[m], comm->channel, into, bytes, what);
    if (m > 0)
      reduceInto(sum.data(), part.data(), count, type, op);
  }
  std::memcpy(out, sum.data(), bytes);
}

ncclResult_t checkPeer(ncclComm *comm, int peer, ncclDataType_t type) {
  if (!comm || peer < 0 || peer >= comm->size || bytesOf(type) == 0)
    return ncclInvalidArgument;
  return ncclSuccess;
}

} // namespace

//===----------------------------------------------------------------------===//
// Communicators
//===----------------------------------------------------------------------===//

const char *ncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess:
    return "no error";
  case ncclInvalidArgument:
    return "invalid argument (emulated NCCL: a peer, type or reduction it "
           "does not have)";
  case ncclInvalidUsage:
    return "invalid usage (emulated NCCL: several ranks run under mpirun, "
           "with the MPI world's size and ranks, or join through the id of "
           "rank 0's ncclGetUniqueId)";
  case ncclSystemError:
    return "system error (emulated NCCL: the sockets of ranks started "
           "without mpirun; the line before says what failed)";
  default:
    return "internal error (emulated NCCL)";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  if (!uniqueId)
    return ncclInvalidArgument;
  std::memset(uniqueId, 0, sizeof(*uniqueId));
  if (mpiWorldSize() > 1) {
    std::memcpy(uniqueId->internal, kMpiId, sizeof(kMpiId));
    return ncclSuccess;
  }
  // Not under mpirun with several ranks: the others may join over sockets.
  uint16_t port = 0;
  std::string error;
  if (!loom::emulated_nccl::listenForRanks(port, error)) {
    std::fprintf(stderr, "emulated NCCL: ncclGetUniqueId: %s\n", error.c_str());
    return ncclSystemError;
  }
  std::memcpy(uniqueId->internal, kSocketsId, sizeof(kSocketsId));
  std::memcpy(uniqueId->internal + sizeof(kSocketsId), &port, sizeof(port));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id,
                              int rank) {
  if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
    return ncclInvalidArgument;
  auto c = std::make_unique<ncclComm>();
  c->rank = rank;
  c->size = nranks;
  if (std::memcmp(id.internal, kSocketsId, sizeof(kSocketsId)) == 0) {
    if (nranks == 1) {
      loom::emulated_nccl::closeListener();
    } else {
      uint16_t port = 0;
      std::memcpy(&port, id.internal + sizeof(kSocketsId), sizeof(port));
      std::string error;
      if (!loom::emulated_nccl::connectWorld(rank, nranks, port, error)) {
        std::fprintf(stderr, "emulated NCCL: ncclCommInitRank: %s\n",
                     error.c_str());
        return ncclSystemError;
      }
      c->sockets = true;
      c->channel = 1;
      for (int r = 0; r < nranks; ++r)
        c->members.push_back(r);
    }
  } else if (mpiRunning()) {
    int worldRank = 0, worldSize = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
    MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
    if (worldSize != nranks || worldRank != rank)
      return ncclInvalidUsage;
    MPI_Comm_dup(MPI_COMM_WORLD, &c->mpi);
  } else if (nranks != 1) {
    return ncclInvalidUsage;
  }
  *comm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key,
                           ncclComm_t *newcomm, ncclConfig_t *) {
  if (!comm || !newcomm)
    return ncclInvalidArgument;
  auto c = std::make_unique<ncclComm>();
  if (comm->sockets) {
    // Every member learns every member's color and key; a child's members
    // are its color's, by key then parent rank (MPI_Comm_split's order).
    using namespace loom::emulated_nccl;
    const int32_t mine[2] = {color, key};
    for (int m = 0; m < comm->size; ++m)
      sendTo(comm->members[m], comm->channel, mine, sizeof(mine));
    std::vector<std::array<int32_t, 3>> all(comm->size);
    for (int m = 0; m < comm->size; ++m) {
      receiveFrom(comm->members[m], comm->channel, all[m].data(),
                  2 * sizeof(int32_t), "ncclCommSplit's colors");
      all[m][2] = m;
    }
    const uint64_t split = ++comm->splits;
    if (color < 0) {
      *newcomm = nullptr;
      return ncclSuccess;
    }
    std::vector<std::array<int32_t, 3>> same;
    for (const auto &a : all)
      if (a[0] == color)
        same.push_back(a);
    std::stable_sort(same.begin(), same.end(),
                     [](const auto &a, const auto &b) {
                       return a[1] != b[1] ? a[1] < b[1] : a[2] < b[2];
                     });
    c->sockets = true;
    c->size = static_cast<int>(same.size());
    for (int i = 0; i < c->size; ++i) {
      if (same[i][2] == comm->rank)
        c->rank = i;
      c->members.push_back(comm->members[same[i][2]]);
    }
    // The child's channel: the parent's, the split's number and the color,
    // mixed (splitmix64), the same on every member.
    uint64_t h = comm->channel * 0x9E3779B97F4A7C15ull +
                 split * 0x100000001B3ull + static_cast<uint64_t>(color);
    h = (h ^ (h >> 30)) * 0xBF58476D1CE4E5B9ull;
    h = (h ^ (h >> 27)) * 0x94D049BB133111EBull;
    c->channel = (h ^ (h >> 31)) | 2; // never the world's 1
  } else if (comm->mpi == MPI_COMM_NULL) {
    c->rank = 0, c->size = 1;
  } else {
    MPI_Comm_split(comm->mpi, color < 0 ? MPI_UNDEFINED : color, key, &c->mpi);
    if (c->mpi == MPI_COMM_NULL) {
      *newcomm = nullptr;
      return ncclSuccess;
    }
    MPI_Comm_rank(c->mpi, &c->rank);
    MPI_Comm_size(c->mpi, &c->size);
  }
  *newcomm = c.release();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm)
    return ncclSuccess;
  if (mpiRunning() && !comm->sockets) {
    progressSends(comm, /*all=*/true);
    if (comm->mpi != MPI_COMM_NULL)
      MPI_Comm_free(&comm->mpi);
  }
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  // The process is ending, and the watchdog's thread aborts while the main
  // thread may still be inside a call on `comm` (blocked in MPI): the
  // communicator is left as it is, not freed under that call.
  return comm ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError) {
  if (!comm || !asyncError)
    return ncclInvalidArgument;
  // MPI reports a lost peer by ending the job, so no error is ever pending.
  *asyncError = ncclSuccess;
  return ncclSuccess;
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t) {
  MPI_Datatype dt;
  MPI_Op mop;
  if (!comm || !mpiOf(datatype, op, dt, mop))
    return ncclInvalidArgument;
  stallIfAsked();
  const size_t bytes = count * bytesOf(datatype);
  if (alone(comm)) {
    if (sendbuff != recvbuff && bytes > 0)
      std::memcpy(recvbuff, sendbuff, bytes);
  } else if (comm->sockets) {
    reduceOverSockets(
        comm, sendbuff, recvbuff, count, datatype, op, [](int) { return 0; },
        "an all-reduce's contribution");
  } else {
    MPI_Allreduce(sendbuff == recvbuff ? MPI_IN_PLACE : sendbuff, recvbuff,
                  static_cast<int>(count), dt, mop, comm->mpi);
  }
  if (op == ncclAvg)
    divide(recvbuff, count, datatype, comm->size);
  return ncclSuccess;
}

ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff,
                           size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t) {
  if (!comm || bytesOf(datatype) == 0)
    return ncclInvalidArgument;
  stallIfAsked();
  const size_t bytes = sendcount * bytesOf(datatype);
  auto *mine = static_cast<uint8_t *>(recvbuff) + comm->rank * bytes;
  if (alone(comm)) {
    if (sendbuff != mine && bytes > 0)
      std::memcpy(mine, sendbuff, bytes);
    return ncclSuccess;
  }
  if (comm->sockets) {
    using namespace loom::emulated_nccl;
    std::vector<uint8_t> own(static_cast<const uint8_t *>(sendbuff),
                             static_cast<const uint8_t *>(sendbuff) + bytes);
    for (int m = 0; m < comm->size; ++m)
      if (m != comm->rank)
        sendTo(comm->members[m], comm->channel, own.data(), bytes);
    for (int m = 0; m < comm->size; ++m) {
      auto *slot = static_cast<uint8_t *>(recvbuff) + m * bytes;
      if (m == comm->rank)
        std::memcpy(slot, own.data(), bytes);
      else
        receiveFrom(comm->members[m], comm->channel, slot, bytes,
                    "an all-gather's block");
    }
    return ncclSuccess;
  }
  MPI_Allgather(sendbuff == mine ? MPI_IN_PLACE : sendbuff,
                static_cast<int>(bytes), MPI_BYTE, recvbuff,
                static_cast<int>(bytes), MPI_BYTE, comm->mpi);
  return ncclSuccess;
}

ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                               size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t) {
  MPI_Datatype dt;
  MPI_Op mop;
  if (!comm || !mpiOf(datatype, op, dt, mop))
    return ncclInvalidArgument;
  stallIfAsked();
  const size_t bytes = recvcount * bytesOf(datatype);
  if (alone(comm)) {
    if (sendbuff != recvbuff && bytes > 0)
      std::memmove(recvbuff, sendbuff, bytes);
  } else if (comm->sockets) {
    reduceOverSockets(
        comm, sendbuff, recvbuff, recvcount, datatype, op,
        [](int m) { return m; }, "a reduce-scatter's block");
  } else {
    const auto *mine = static_cast<const uint8_t *>(sendbuff) + comm->rank * bytes;
    MPI_Reduce_scatter_block(recvbuff == mine ? MPI_IN_PLACE : sendbuff,
                             recvbuff, static_cast<int>(recvcount), dt, mop,
                             comm->mpi);
  }
  if (op == ncclAvg)
    divide(recvbuff, recvcount, datatype, comm->size);
  return ncclSuccess;
}

//===----------------------------------------------------------------------===//
// Point to point
//===----------------------------------------------------------------------===//

ncclResult_t ncclGroupStart() {
  ++groupDepth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (groupDepth == 0)
    return ncclInvalidUsage;
  if (--groupDepth > 0)
    return ncclSuccess;
  stallIfAsked();
  std::vector<MPI_Request> requests;
  std::vector<GroupedCall> calls;
  calls.swap(grouped);
  // Over sockets the sends go first (each completes while its peer sends
  // too), then the receives, in the order they were called.
  for (const GroupedCall &g : calls)
    if (g.comm->sockets && g.send)
      loom::emulated_nccl::sendTo(g.comm->members[g.peer], g.comm->channel,
                                  g.sendBuf, g.bytes);
  for (const GroupedCall &g : calls)
    if (g.comm->sockets && !g.send)
      loom::emulated_nccl::receiveFrom(g.comm->members[g.peer], g.comm->channel,
                                       g.recvBuf, g.bytes,
                                       "a grouped receive's message");
  for (const GroupedCall &g : calls) {
    if (g.comm->mpi == MPI_COMM_NULL)
      continue; // a world of one has no other peer; sockets are done
    MPI_Request r;
    if (g.send)
      MPI_Isend(g.sendBuf, static_cast<int>(g.bytes), MPI_BYTE, g.peer, 0,
                g.comm->mpi, &r);
    else
      MPI_Irecv(g.recvBuf, static_cast<int>(g.bytes), MPI_BYTE, g.peer, 0,
                g.comm->mpi, &r);
    requests.push_back(r);
  }
  // In a world of one (no MPI) every call is to the rank itself: the k-th
  // receive of a communicator takes its k-th send.
  std::vector<const GroupedCall *> selfSends;
  for (const GroupedCall &g : calls)
    if (selfOnly(g.comm) && g.send)
      selfSends.push_back(&g);
  size_t nextSend = 0;
  for (const GroupedCall &g : calls)
    if (selfOnly(g.comm) && !g.send) {
      if (nextSend >= selfSends.size() ||
          selfSends[nextSend]->bytes != g.bytes)
        return ncclInvalidUsage;
      std::memcpy(g.recvBuf, selfSends[nextSend++]->sendBuf, g.bytes);
    }
  if (!calls.empty())
    waitAll(requests, "a grouped send or receive", calls[0].peer,
            calls[0].comm);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *sendbuff, size_t count,
                      ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t) {
  if (ncclResult_t r = checkPeer(comm, peer, datatype); r != ncclSuccess)
    return r;
  const size_t bytes = count * bytesOf(datatype);
  if (groupDepth > 0) {
    grouped.push_back({true, sendbuff, nullptr, bytes, peer, comm});
    return ncclSuccess;
  }
  if (selfOnly(comm))
    return ncclInvalidUsage; // to itself outside a group: nothing receives
  stallIfAsked();
  if (comm->sockets) {
    loom::emulated_nccl::sendTo(comm->members[peer], comm->channel, sendbuff,
                                bytes);
    return ncclSuccess;
  }
  ncclComm::Pending p;
  p.copy.reset(new uint8_t[bytes > 0 ? bytes : 1]);
  std::memcpy(p.copy.get(), sendbuff, bytes);
  MPI_Isend(p.copy.get(), static_cast<int>(bytes), MPI_BYTE, peer, 0,
            comm->mpi, &p.request);
  comm->sends.push_back(std::move(p));
  progressSends(comm, /*all=*/false);
  return ncclSuccess;
}

ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                      int peer, ncclComm_t comm, cudaStream_t) {
  if (ncclResult_t r = checkPeer(comm, peer, datatype); r != ncclSuccess)
    return r;
  const size_t bytes = count * bytesOf(datatype);
  if (groupDepth > 0) {
    grouped.push_back({false, nullptr, recvbuff, bytes, peer, comm});
    return ncclSuccess;
  }
  if (selfOnly(comm))
    return ncclInvalidUsage;
  stallIfAsked();
  if (comm->sockets) {
    loom::emulated_nccl::receiveFrom(comm->members[peer], comm->channel,
                                     recvbuff, bytes, "a message");
    return ncclSuccess;
  }
  std::vector<MPI_Request> request(1);
  MPI_Irecv(recvbuff, static_cast<int>(bytes), MPI_BYTE, peer, 0, comm->mpi,
            &request[0]);
  waitAll(request, "a message", peer, comm);
  progressSends(comm, /*all=*/false);
  return ncclSuccess;
}

/// The nccl* functions above are linked in: nothing to load.
loom::Status loom::cuda::loadNccl() { return Status::success(); }
