//===- comm_mpi.h - Communicator over MPI -----------------------*- C++ -*-===//
//
// The CPU backend of communicator.h: MPI collectives on sub-communicators
// made with MPI_Comm_split per SET of mesh axes (color: the coordinates on the
// other axes, key: the group rank), cached until the mesh changes. MPI errors
// return a Status (MPI_ERRORS_RETURN). send() copies into an owned buffer and
// posts MPI_Isend, so rings of sends never deadlock; flush() waits for them.
// Built only with LOOM_ENABLE_MPI.
//
// NCCL has no tags: its send / recv between two ranks match in issue order
// (runtime/cuda/comm_nccl.h). With LOOM_CHECK_P2P_ORDER=1 in the environment
// this communicator checks that the program would run that way: each recv
// must be for the earliest message not yet received from its peer (MPI's
// per-sender order), else it errors naming both tags, so a schedule that
// would hand a GPU the wrong micro-batch is caught on CPU.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CPU_COMM_MPI_H
#define LOOM_RUNTIME_CPU_COMM_MPI_H

#include "runtime/core/communicator.h"

#include <mpi.h>

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <vector>

namespace loom {

class MpiCommunicator final : public Communicator {
public:
  /// MPI_Init (if not yet initialized; MPI_Finalize at exit) and a
  /// communicator over MPI_COMM_WORLD.
  static Status createWorld(int *argc, char ***argv,
                            std::unique_ptr<Communicator> &out);
  /// A communicator over `comm` (duplicated; MPI must be initialized).
  static Status create(MPI_Comm comm, std::unique_ptr<Communicator> &out);
  ~MpiCommunicator() override;
  const char *backend() const override { return "mpi"; }
  void abort(int code) override;

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
  void doProgress() override;
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
  Status doFlush() override;
  Status doBarrier() override;
  void meshChanged() override;
  /// Frees the cached group communicators.
  void freeGroups();

private:
  MpiCommunicator(MPI_Comm comm, int rank, int size)
      : Communicator(rank, size), world(comm) {}
  Status group(const std::vector<uint32_t> &axes, MPI_Comm &out);
  /// The group, MPI reduction and int count of a reduction over `axes`.
  Status reductionArgs(const std::vector<uint32_t> &axes,
                       program::Reduction op, program::DType dtype,
                       int64_t count, MPI_Comm &comm, MPI_Op &mop, int &n);
  /// A BF16 all-reduce (comm_mpi.cpp): the all-to-all of blocks, then the
  /// fp32 reduction of this member's block and the all-gather. MPI reads the
  /// counts and receive buffer until the all-to-all completes.
  struct BF16AllReduce {
    MPI_Comm comm = MPI_COMM_NULL;
    MPI_Request request = MPI_REQUEST_NULL;
    uint16_t *buf = nullptr;
    int64_t count = 0, groupSize = 1;
    program::Reduction op = program::Reduction::Sum;
    std::vector<int> sendCounts, sendDispls, recvCounts, recvDispls;
    std::vector<uint16_t> received;
  };
  /// Starts (or, without `nonblocking`, runs) the all-to-all half.
  Status startBF16AllReduce(void *buf, int64_t count, program::Reduction op,
                            const std::vector<uint32_t> &axes, bool nonblocking,
                            std::shared_ptr<BF16AllReduce> &out);
  /// After the all-to-all: reduce, round, all-gather.
  Status finishBF16AllReduce(BF16AllReduce &ar);
  MPI_Comm world;
  /// LOOM_CHECK_P2P_ORDER=1: recvs must match sends in issue order.
  bool checkP2POrder = false;
  std::map<uint64_t, MPI_Comm> groups;
  struct PendingSend {
    std::vector<uint8_t> data;
    MPI_Request request;
  };
  std::list<PendingSend> sends;
  /// Started collectives (MPI_Iallreduce, MPI_Iallgather,
  /// MPI_Ireduce_scatter_block, a BF16 reduce-scatter's MPI_Ialltoall) by
  /// ticket; an average is divided by the group size on completion.
  struct PendingCollective {
    MPI_Request request = MPI_REQUEST_NULL;
    /// Non-null: divide `count` elements by groupSize on completion.
    void *averageBuf = nullptr;
    int64_t count = 0;
    int64_t groupSize = 1;
    std::shared_ptr<BF16AllReduce> bf16; // a BF16 all-reduce's second half
    /// A BF16 reduce-scatter's second half: reduce what the all-to-all
    /// received in fp32 and round once into the output.
    std::function<void()> finish;
  };
  /// A collective of `count` elements over `axes`, not started yet.
  PendingCollective pendingOver(int64_t count,
                                const std::vector<uint32_t> &axes) const {
    PendingCollective p;
    p.count = count;
    p.groupSize = groupSize(axes);
    return p;
  }
  std::map<Ticket, PendingCollective> started;
  Ticket nextTicket = 0;
  std::vector<uint8_t> scratch;
};

} // namespace loom

#endif // LOOM_RUNTIME_CPU_COMM_MPI_H
