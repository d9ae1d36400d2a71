//===- communicator.h - Collectives over the device mesh --------*- C++ -*-===//
//
// One interface, one implementation per backend (the split PyTorch makes with
// process groups): SingleRankCommunicator (every group has one member;
// collectives are copies) and MpiCommunicator (runtime/cpu/comm_mpi.h; later
// NCCL). Ranks are laid out row-major over the program's mesh (first axis
// slowest). A group is named by a SET of mesh axes: the ranks whose
// coordinates differ only on those axes; inside it, members are ordered by
// the row-major index of their coordinates on the group's axes (in mesh
// order), which is the group rank.
//
// The public collectives are non-virtual wrappers (count bytes, time) around
// the backend's virtual do*() methods, so every backend counts the same way:
// the nccl-tests ring convention with S the full buffer bytes (the larger of
// input and output for gather / scatter) and n the group size:
//   all_reduce 2(n-1)/n S, all_gather / reduce_scatter / all_to_all
//   (n-1)/n S, send S (recv counts nothing).
//
// Buffers are dense and contiguous; the executor packs non-leading
// dimensions (KernelBackend::packBlocks / unpackBlocks) before and after.
//
// Two kinds of pointers. The collectives take *buffer pointers*: addresses
// in the BufferMemory the executor binds (bindBufferMemory; none bound: host
// memory). The *Host variants (allReduceHost, allGatherHost, sendHost,
// recvHost) take host pointers: the driver's losses and run summary,
// checkpoint tensors. Each backend moves one kind natively (MPI: host
// memory; NCCL: device buffers; the single rank: buffers, copied through
// BufferMemory::copy) and the base class stages the other kind through a
// temporary, so a device arena works over MPI (staged through the host) and
// host values work over NCCL (staged through a device temporary). Staged
// collectives run to completion when started (ticket -1).
//
// BF16 (mixed precision) is carried as 2-byte elements, so it is counted at
// half of fp32's bytes; reductions on it compute in fp32 and round once to
// nearest even, giving every rank the same bits (see comm_mpi.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_COMMUNICATOR_H
#define LOOM_RUNTIME_CORE_COMMUNICATOR_H

#include "runtime/core/buffer_memory.h"
#include "runtime/core/status.h"
#include "runtime/program/program.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace loom {

/// A mesh axis as the communicator sees it.
struct MeshAxisInfo {
  std::string name;
  int64_t size = 1;
};

/// Collective kinds, for counters.
enum class CommKind { AllReduce = 0, AllGather, ReduceScatter, AllToAll, Send };
constexpr int kNumCommKinds = 5;
/// "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send".
const char *commKindName(CommKind kind);

/// Bytes and time a communicator has spent (cumulative until reset()).
struct CommStats {
  std::array<int64_t, kNumCommKinds> sentBytes{};
  std::array<int64_t, kNumCommKinds> calls{};
  int64_t commNs = 0;
  void reset() { *this = CommStats(); }
};

/// Bytes one collective sends per rank by the ring formula (see above).
int64_t ringBytes(CommKind kind, int64_t fullBytes, int64_t groupSize);

/// "dp=2,tp=1" (or "single rank" for an empty mesh).
std::string meshString(const std::vector<MeshAxisInfo> &mesh);

/// Product of the mesh sizes (1 for an empty mesh).
int64_t meshDeviceCount(const std::vector<MeshAxisInfo> &mesh);

/// The mesh of a verified program.
std::vector<MeshAxisInfo> programMesh(const program::Program &program);

class Communicator {
public:
  virtual ~Communicator();

  /// World rank and size (all ranks of the job).
  int rank() const { return worldRank; }
  int size() const { return worldSize; }
  /// Backend name ("single", "mpi").
  virtual const char *backend() const = 0;

  /// Lays the ranks out over `mesh`. Errors when its device count differs
  /// from size() (naming both and the -np to use).
  Status setMesh(const std::vector<MeshAxisInfo> &mesh);
  const std::vector<MeshAxisInfo> &mesh() const { return meshAxes; }
  /// This rank's coordinates (one per mesh axis).
  std::vector<int64_t> coords() const { return coordsOf(worldRank); }
  std::vector<int64_t> coordsOf(int worldRank) const;
  int rankOf(const std::vector<int64_t> &coords) const;
  /// Coordinate on the axis named `name` (0 when there is no such axis), and
  /// that axis' size (1 when absent).
  int64_t coordOn(const std::string &name) const;
  int64_t axisSize(const std::string &name) const;

  /// Group of `axes` (indices into mesh(), any order, distinct).
  int64_t groupSize(const std::vector<uint32_t> &axes) const;
  int64_t groupRank(const std::vector<uint32_t> &axes) const;
  /// World rank of member `groupRank` of this rank's group over `axes`.
  int groupMember(const std::vector<uint32_t> &axes, int64_t groupRank) const;
  /// Linear index of this rank's coordinates on `axes` in the order given,
  /// first axis major (Param.sharding's block index).
  int64_t blockIndex(const std::vector<uint32_t> &axes) const;

  /// In place over `count` elements of `buf`.
  Status allReduce(void *buf, int64_t count, program::DType dtype,
                   program::Reduction op, const std::vector<uint32_t> &axes);
  /// A started collective, completed by complete().
  using Ticket = int64_t;
  /// Starts an in-place all-reduce that the caller completes later with
  /// complete(ticket), leaving `buf` untouched until then (DDP's bucket
  /// overlap). Counted (bytes, calls) when started. Backends without
  /// nonblocking collectives run it to completion here (ticket -1).
  Status startAllReduce(void *buf, int64_t count, program::DType dtype,
                        program::Reduction op,
                        const std::vector<uint32_t> &axes, Ticket &ticket);
  /// Starts an all-gather (as allGather) completed by complete(ticket);
  /// `in` must stay unchanged and `out` unread until then (ZeRO-3
  /// prefetch).
  Status startAllGather(const void *in, void *out, int64_t count,
                        program::DType dtype,
                        const std::vector<uint32_t> &axes, Ticket &ticket);
  /// Starts a reduce-scatter (as reduceScatter) completed by
  /// complete(ticket); `in` must stay unchanged and `out` unread until then
  /// (ZeRO-2/3's gradient reduce-scatter behind the next block's backward).
  Status startReduceScatter(const void *in, void *out, int64_t count,
                            program::DType dtype, program::Reduction op,
                            const std::vector<uint32_t> &axes,
                            Ticket &ticket);
  /// Waits for a started collective (a ticket of -1 is already complete).
  Status complete(Ticket ticket);
  /// Lets started collectives advance (MPI moves data only inside MPI
  /// calls): the executor calls it between instructions.
  void progress() { doProgress(); }
  /// `out` receives the group's `count`-element inputs in group-rank order.
  Status allGather(const void *in, void *out, int64_t count,
                   program::DType dtype, const std::vector<uint32_t> &axes);
  /// `in` holds n blocks of `count` elements; group rank i receives the
  /// reduction of everyone's block i in `out`.
  Status reduceScatter(const void *in, void *out, int64_t count,
                       program::DType dtype, program::Reduction op,
                       const std::vector<uint32_t> &axes);
  /// `in` holds n blocks of `count`; block j goes to member j; `out` holds
  /// the n received blocks in group-rank order.
  Status allToAll(const void *in, void *out, int64_t count,
                  program::DType dtype, const std::vector<uint32_t> &axes);
  /// In place over `count` f32 or bf16 elements of `buf` (bf16 reduced in
  /// fp32, rounded once), among the ranks whose
  /// coordinate on mesh axis `axis` is one of `members` (increasing; this
  /// rank must be one; all other coordinates equal to this rank's): a
  /// pipeline's shared parameter. Every member reduces the values in member
  /// order, so all get the same bits. Counted as an all_reduce of a group of
  /// members.size().
  Status allReduceAmong(void *buf, int64_t count, program::DType dtype,
                        program::Reduction op, uint32_t axis,
                        const std::vector<int64_t> &members);
  /// To / from world rank `peer`, matched by `tag` (>= 0). send() copies the
  /// data and returns at once; flush() waits until every send completed.
  Status send(const void *buf, int64_t count, program::DType dtype, int peer,
              int64_t tag);
  Status recv(void *buf, int64_t count, program::DType dtype, int peer,
              int64_t tag);
  Status flush();
  Status barrier();
  /// Takes the whole job down (MPI_Abort); does not return for MPI.
  virtual void abort(int code) = 0;

  /// The memory the collectives' buffer pointers live in (not owned; it
  /// must stay alive until unbound). The executor binds its own at create
  /// and unbinds it (nullptr: host memory) when destroyed. Releases the
  /// staging temporary taken from the previous memory.
  void bindBufferMemory(BufferMemory *memory);
  BufferMemory *bufferMemory() const { return memory; }

  /// The collectives on host pointers (same semantics and byte counters as
  /// the buffer-pointer ones above): values the host computed or reads
  /// (losses, the run summary, checkpoint tensors).
  Status allReduceHost(void *buf, int64_t count, program::DType dtype,
                       program::Reduction op,
                       const std::vector<uint32_t> &axes);
  Status allGatherHost(const void *in, void *out, int64_t count,
                       program::DType dtype, const std::vector<uint32_t> &axes);
  Status sendHost(const void *buf, int64_t count, program::DType dtype,
                  int peer, int64_t tag);
  Status recvHost(void *buf, int64_t count, program::DType dtype, int peer,
                  int64_t tag);

  const CommStats &stats() const { return counters; }
  void resetStats() { counters.reset(); }

protected:
  Communicator(int rank, int size) : worldRank(rank), worldSize(size) {}
  /// True when the do*() methods read and write host memory (MPI); false
  /// when they take buffer pointers of the bound memory (NCCL, the single
  /// rank).
  virtual bool transportsHostMemory() const { return true; }
  /// True when host pointers can never reach do*() directly (NCCL: device
  /// pointers only), so the *Host collectives need a bound memory.
  virtual bool requiresBoundMemoryForHost() const { return false; }
  virtual Status doAllReduce(void *buf, int64_t count, program::DType dtype,
                             program::Reduction op,
                             const std::vector<uint32_t> &axes) = 0;
  /// Default: no nonblocking path; run the all-reduce now (ticket -1).
  virtual Status doStartAllReduce(void *buf, int64_t count,
                                  program::DType dtype, program::Reduction op,
                                  const std::vector<uint32_t> &axes,
                                  Ticket &ticket) {
    ticket = -1;
    return doAllReduce(buf, count, dtype, op, axes);
  }
  virtual Status doStartAllGather(const void *in, void *out, int64_t count,
                                  program::DType dtype,
                                  const std::vector<uint32_t> &axes,
                                  Ticket &ticket) {
    ticket = -1;
    return doAllGather(in, out, count, dtype, axes);
  }
  virtual Status doStartReduceScatter(const void *in, void *out,
                                      int64_t count, program::DType dtype,
                                      program::Reduction op,
                                      const std::vector<uint32_t> &axes,
                                      Ticket &ticket) {
    ticket = -1;
    return doReduceScatter(in, out, count, dtype, op, axes);
  }
  virtual Status doComplete(Ticket) { return Status::success(); }
  virtual void doProgress() {}
  virtual Status doAllGather(const void *in, void *out, int64_t count,
                             program::DType dtype,
                             const std::vector<uint32_t> &axes) = 0;
  virtual Status doReduceScatter(const void *in, void *out, int64_t count,
                                 program::DType dtype, program::Reduction op,
                                 const std::vector<uint32_t> &axes) = 0;
  virtual Status doAllToAll(const void *in, void *out, int64_t count,
                            program::DType dtype,
                            const std::vector<uint32_t> &axes) = 0;
  virtual Status doSend(const void *buf, int64_t count, program::DType dtype,
                        int peer, int64_t tag) = 0;
  virtual Status doRecv(void *buf, int64_t count, program::DType dtype,
                        int peer, int64_t tag) = 0;
  /// allReduceAmong after its checks: `ranks` are the members' world ranks
  /// in member order, ranks[self] this one. The default exchanges host
  /// copies (rawSendHost / rawRecvHost) and reduces on the host; a device
  /// transport (NCCL) overrides it to stay on the device, with the same
  /// member-order reduction so every member still gets the same bits.
  virtual Status doAllReduceAmong(void *buf, int64_t count,
                                  program::DType dtype, program::Reduction op,
                                  const std::vector<int> &ranks, size_t self);
  virtual Status doFlush() = 0;
  virtual Status doBarrier() = 0;
  /// Called after the mesh changed (drop cached sub-communicators).
  virtual void meshChanged() {}
  /// Axes in mesh order, as a bit mask (group cache key).
  static uint64_t axesMask(const std::vector<uint32_t> &axes);

  int worldRank = 0, worldSize = 1;
  std::vector<MeshAxisInfo> meshAxes;
  CommStats counters;
  /// The bound buffer memory (nullptr: host memory).
  BufferMemory *memory = nullptr;

private:
  /// Buffer pointers through host temporaries: a host transport (MPI) with
  /// a memory the host may not touch.
  bool stagesBuffersThroughHost() const;
  /// Host pointers through buffer temporaries: a buffer transport (NCCL,
  /// single rank) with a memory the host may not touch.
  bool stagesHostThroughBuffers() const;
  /// Runs `transport(in', out')` where in' holds a host copy of `inBytes`
  /// at buffer pointer `in` and out' is copied to buffer pointer `out`
  /// (`outBytes`) afterwards; in == out shares one temporary.
  Status throughHost(const void *in, uint64_t inBytes, void *out,
                     uint64_t outBytes,
                     const std::function<Status(const void *, void *)> &f);
  /// The converse: host `in` / `out` through a buffer temporary.
  Status throughBuffers(const void *in, uint64_t inBytes, void *out,
                        uint64_t outBytes,
                        const std::function<Status(const void *, void *)> &f);
  /// Host send / recv of host pointers (staged when needed), uncounted.
  Status rawSendHost(const void *buf, int64_t count, program::DType dtype,
                     int peer, int64_t tag);
  Status rawRecvHost(void *buf, int64_t count, program::DType dtype, int peer,
                     int64_t tag);
  Status checkHostTransport() const;
  std::vector<uint8_t> hostStage;
  uint8_t *bufferStage = nullptr;
  uint64_t bufferStageBytes = 0;
};

/// One rank alone: every group has size 1, collectives copy (through the
/// bound BufferMemory, so on a device arena they are device copies), send /
/// recv only to itself (matched by tag; the message is kept in a host copy).
class SingleRankCommunicator final : public Communicator {
public:
  SingleRankCommunicator() : Communicator(0, 1) {}
  const char *backend() const override { return "single"; }
  void abort(int code) override;

protected:
  Status doAllReduce(void *, int64_t, program::DType, program::Reduction,
                     const std::vector<uint32_t> &) override;
  Status doAllGather(const void *in, void *out, int64_t count,
                     program::DType dtype,
                     const std::vector<uint32_t> &) override;
  Status doReduceScatter(const void *in, void *out, int64_t count,
                         program::DType dtype, program::Reduction,
                         const std::vector<uint32_t> &) override;
  Status doAllToAll(const void *in, void *out, int64_t count,
                    program::DType dtype,
                    const std::vector<uint32_t> &) override;
  Status doSend(const void *buf, int64_t count, program::DType dtype, int peer,
                int64_t tag) override;
  Status doRecv(void *buf, int64_t count, program::DType dtype, int peer,
                int64_t tag) override;
  Status doFlush() override { return Status::success(); }
  Status doBarrier() override { return Status::success(); }
  /// Copies through the bound memory (BufferMemory::copy; host memmove
  /// when none is bound).
  bool transportsHostMemory() const override { return false; }

private:
  Status copyBytes(void *dst, const void *src, int64_t bytes);
  std::multimap<int64_t, std::vector<uint8_t>> pending; // by tag
};

/// True when this process was started by mpirun (OpenMPI / PMIx env).
bool launchedUnderMpirun();

/// The world communicator: MPI when the runtime was built with it and the
/// process runs under mpirun (MPI_Init here), else a SingleRankCommunicator.
Status createWorldCommunicator(int *argc, char ***argv,
                               std::unique_ptr<Communicator> &out);

/// Whether this runtime was built with MPI.
bool runtimeHasMpi();

/// `src` viewed as [outer, n, inner] (shape split at `dim`, whose extent is
/// n blocks) to dense `dst` [n, outer, inner]: block j of dimension `dim`
/// becomes contiguous chunk j. `shape[dim]` must be divisible by n.
void packBlocks(void *dst, const void *src, const std::vector<int64_t> &shape,
                int64_t dim, int64_t n, int64_t elemBytes);
/// Inverse: `src` [n, outer, inner] (n chunks of shape `blockShape`) to
/// `dst` [outer, n, inner], i.e. the chunks concatenated along `dim`.
void unpackBlocks(void *dst, const void *src,
                  const std::vector<int64_t> &blockShape, int64_t dim,
                  int64_t n, int64_t elemBytes);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_COMMUNICATOR_H
