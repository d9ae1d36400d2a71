//===- comm_nccl.h - The Communicator over NCCL -----------------*- C++ -*-===//
//
// NcclCommunicator implements runtime/core/communicator.h on device buffers.
// Collectives run on a communication stream of their own, ordered against
// the compute stream with events: each collective first waits for the
// compute work already enqueued (an event recorded on the compute stream),
// and the compute stream waits for it at once (blocking collectives) or
// when the executor completes its ticket (async all-reduce / all-gather),
// so the overlap the compiler planned (DDP buckets, ZeRO-3 prefetch) happens
// on the device without host synchronization.
//
// Groups (mesh axes) are sub-communicators split from the world
// communicator (ncclCommSplit), one per set of mesh axes, all created when
// the mesh is set: ncclCommSplit is collective over the world, and the
// stages of a pipeline use different groups at different times, so a split
// on first use would hang. all_to_all is grouped send/recv.
//
// Point-to-point follows the Communicator contract (send copies the data
// and returns; flush waits): a send first copies its buffer into a staging
// temporary on the compute stream, which never waits for the send, so
// compute may overwrite the buffer at once. Messages to a higher world rank
// travel on one duplicate of the world communicator and stream ("up"),
// messages to a lower one on another ("down"): two neighbours sending to
// each other at once (1F1B's activation one way, gradient the other) then
// never wait on each other's send. NCCL has no tags: messages between two
// ranks in one direction are matched in issue order, which the compiler's
// schedules keep (each stage sends and receives a chunk's micro-batches in
// schedule order).
//
// The ncclUniqueId travels over MPI when the runtime has MPI and the job
// has more than one rank (createNcclWorldCommunicator); a single rank makes
// its own. Without an MPI launcher (a GPU machine without OpenMPI), ranks
// started by hand with LOOM_RANK / LOOM_WORLD_SIZE share it through a file
// (createNcclFileCommunicator).
//
// Every NCCL call is watched (collective_watchdog.h): when one has not
// completed within the timeout, or NCCL reports an asynchronous error, the
// rank prints what it was waiting for and ends (its communicators
// aborted), so a job whose peer died or hung fails instead of hanging.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_COMM_NCCL_H
#define LOOM_RUNTIME_CUDA_COMM_NCCL_H

#include "runtime/core/communicator.h"
#include "runtime/cuda/collective_watchdog.h"

#include <cuda_runtime_api.h>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

struct ncclComm;

namespace loom::cuda {

class NcclCommunicator final : public Communicator {
public:
  /// Joins the NCCL world of `size` ranks as `rank` from a 128-byte
  /// ncclUniqueId every rank holds. `computeStream` is the executor's. A
  /// NCCL call (joining included) not completed `timeoutSeconds` after it
  /// was issued ends the process (0: never).
  static Status create(int rank, int size, const void *uniqueId,
                       cudaStream_t computeStream, double timeoutSeconds,
                       std::unique_ptr<NcclCommunicator> &out);
  ~NcclCommunicator() override;

  const char *backend() const override { return "nccl"; }
  void abort(int code) override;
  cudaStream_t commStream() const { return stream; }

protected:
  Status doAllReduce(void *buf, int64_t count, program::DType dtype,
                     program::Reduction op,
                     const std::vector<uint32_t> &axes) override;
  Status doStartAllReduce(void *buf, int64_t count, program::DType dtype,
                          program::Reduction op,
                          const std::vector<uint32_t> &axes,
                          Ticket &ticket) override;
  Status doStartAllGather(const void *in, void *out, int64_t count,
                          program::DType dtype,
                          const std::vector<uint32_t> &axes,
                          Ticket &ticket) override;
  Status doStartReduceScatter(const void *in, void *out, int64_t count,
                              program::DType dtype, program::Reduction op,
                              const std::vector<uint32_t> &axes,
                              Ticket &ticket) override;
  Status doComplete(Ticket ticket) override;
  Status doAllGather(const void *in, void *out, int64_t count,
                     program::DType dtype,
                     const std::vector<uint32_t> &axes) override;
  Status doReduceScatter(const void *in, void *out, int64_t count,
                         program::DType dtype, program::Reduction op,
                         const std::vector<uint32_t> &axes) override;
  Status doAllToAll(const void *in, void *out, int64_t count,
                    program::DType dtype,
                    const std::vector<uint32_t> &axes) override;
  Status doSend(const void *buf, int64_t count, program::DType dtype, int peer,
                int64_t tag) override;
  Status doRecv(void *buf, int64_t count, program::DType dtype, int peer,
                int64_t tag) override;
  /// On the device: the members' values through grouped ncclSend / ncclRecv
  /// on the world communicator into a device block, then the member-order
  /// reduction (reduce_members.h) on the comm stream; no host round trip.
  Status doAllReduceAmong(void *buf, int64_t count, program::DType dtype,
                          program::Reduction op, const std::vector<int> &ranks,
                          size_t self) override;
  Status doFlush() override;
  Status doBarrier() override;
  void meshChanged() override;
  /// NCCL moves device buffers; host values (losses, checkpoint tensors)
  /// are staged through a temporary of the bound CudaMemory.
  bool transportsHostMemory() const override { return false; }
  bool requiresBoundMemoryForHost() const override { return true; }

private:
  NcclCommunicator(int rank, int size) : Communicator(rank, size) {}
  /// The communicator of this rank's group over `axes` (split when the mesh
  /// was set).
  Status group(const std::vector<uint32_t> &axes, ncclComm *&comm);
  /// Splits the world once per set of mesh axes (collective; every rank in
  /// the same order).
  Status splitGroups();
  /// One direction of point-to-point traffic (see the file comment).
  struct P2pLane {
    ncclComm *comm = nullptr;
    cudaStream_t stream = nullptr;
    cudaEvent_t done = nullptr;
  };
  /// The lane a message from world rank `from` to `to` travels on: both
  /// ends must name the same one (one NCCL communicator per direction).
  P2pLane &laneFor(int from, int to) { return to > from ? up : down; }
  /// Comm stream waits for the compute work enqueued so far.
  Status beginOnCommStream();
  /// Compute stream waits for the comm work enqueued so far.
  Status endOnComputeStream();
  /// Records an event on the comm stream for a started collective.
  Status startTicket(Ticket &ticket);
  /// Runs `call` (NCCL calls that queue work on `stream`, or block the host
  /// when `stream` is null) under the watchdog as what `what()` says (its
  /// string built only when a watchdog runs).
  template <typename Describe, typename Call>
  Status watched(cudaStream_t stream, Describe &&what, Call &&call);
  /// Starts collective `op` of `count` elements over `axes` on the comm
  /// stream after the compute work so far, watched, completing at
  /// `ticket`: `issue(comm, type)` makes the NCCL call on `stream`.
  template <typename Issue>
  Status startCollective(const char *op, int64_t count, program::DType dtype,
                         const std::vector<uint32_t> &axes, Ticket &ticket,
                         Issue &&issue);
  /// "mesh axes dp,tp" (or "the world") for the watchdog's messages.
  std::string axesName(const std::vector<uint32_t> &axes) const;
  /// "all_reduce of 4096 BF16 over mesh axes dp,tp".
  std::string describe(const char *op, int64_t count, program::DType dtype,
                       const std::vector<uint32_t> &axes) const;
  /// Every communicator this rank holds (for the asynchronous-error check
  /// and abort); the caller holds commsMutex.
  std::vector<ncclComm *> communicatorsLocked() const;
  /// What NCCL's asynchronous error check says of them; empty when well.
  std::string asyncErrors() const;
  /// The watchdog's verdict: prints it and ends the process.
  void stalled(const std::string &message);

  ncclComm *world = nullptr;
  std::map<uint64_t, ncclComm *> groups; // by axesMask
  std::vector<MeshAxisInfo> splitFor;    // the mesh `groups` were split for
  Status splitStatus = Status::success();
  P2pLane up, down;
  /// Messages this rank sent itself (device copies, in send order): NCCL
  /// would need a grouped send + recv, the executor issues them apart.
  std::deque<std::pair<void *, size_t>> selfMessages;
  cudaStream_t compute = nullptr, stream = nullptr;
  cudaEvent_t computeDone = nullptr, commDone = nullptr;
  std::map<Ticket, cudaEvent_t> tickets;
  Ticket nextTicket = 0;
  /// Guards the communicator handles the watchdog's thread reads (world,
  /// the lanes', groups) while this thread creates or destroys them.
  mutable std::mutex commsMutex;
  /// Declared last: destroyed first, before anything it watches.
  std::unique_ptr<CollectiveWatchdog> watchdog;
};

/// The NCCL world for this job: `bootstrap` (MPI or single rank) gives rank
/// and size; rank 0's ncclUniqueId is broadcast over MPI. Errors when the
/// job has several ranks but the runtime was built without MPI.
/// `timeoutSeconds` is the watchdog's (NcclCommunicator::create).
Status
createNcclWorldCommunicator(const Communicator &bootstrap,
                            cudaStream_t computeStream,
                            std::unique_ptr<NcclCommunicator> &out,
                            double timeoutSeconds = kDefaultNcclTimeoutSeconds);

/// The NCCL world of `size` processes started without MPI: rank 0 writes its
/// ncclUniqueId to `idFile` (atomically: temp file + rename), the others
/// wait for it (up to `idTimeoutSeconds`). `idFile` must be a fresh path for
/// each job (a stale id would make ncclCommInitRank wait
/// until the watchdog ends it). Errors
/// name the file, the rank and what to start. `timeoutSeconds` is the
/// watchdog's (NcclCommunicator::create).
Status
createNcclFileCommunicator(int rank, int size, const std::string &idFile,
                           double idTimeoutSeconds, cudaStream_t computeStream,
                           std::unique_ptr<NcclCommunicator> &out,
                           double timeoutSeconds = kDefaultNcclTimeoutSeconds);

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_COMM_NCCL_H
