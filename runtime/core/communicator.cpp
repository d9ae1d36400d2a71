//===- communicator.cpp - Collectives over the device mesh ------*- C++ -*-===//
#include "runtime/core/communicator.h"

#include "runtime/core/bfloat16.h"

#include "runtime/core/executor.h" // steadyNowNs

#ifdef LOOM_HAVE_MPI
#include "runtime/cpu/comm_mpi.h"
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace loom {

using program::DType;
using program::Reduction;

const char *commKindName(CommKind kind) {
  switch (kind) {
  case CommKind::AllReduce:
    return "all_reduce";
  case CommKind::AllGather:
    return "all_gather";
  case CommKind::ReduceScatter:
    return "reduce_scatter";
  case CommKind::AllToAll:
    return "all_to_all";
  case CommKind::Send:
    return "send";
  }
  return "unknown";
}

int64_t ringBytes(CommKind kind, int64_t fullBytes, int64_t n) {
  if (kind == CommKind::Send)
    return fullBytes;
  if (n <= 1)
    return 0;
  const int64_t factor = kind == CommKind::AllReduce ? 2 : 1;
  return factor * (n - 1) * fullBytes / n;
}

std::string meshString(const std::vector<MeshAxisInfo> &mesh) {
  if (mesh.empty())
    return "single rank";
  std::string s;
  for (const MeshAxisInfo &a : mesh)
    s += (s.empty() ? "" : ",") + a.name + "=" + std::to_string(a.size);
  return s;
}

int64_t meshDeviceCount(const std::vector<MeshAxisInfo> &mesh) {
  int64_t n = 1;
  for (const MeshAxisInfo &a : mesh)
    n *= a.size;
  return n;
}

std::vector<MeshAxisInfo> programMesh(const program::Program &program) {
  std::vector<MeshAxisInfo> mesh;
  if (program.mesh())
    for (const program::MeshAxis *a : *program.mesh())
      mesh.push_back({a->name() ? a->name()->str() : std::string(), a->size()});
  return mesh;
}

//===----------------------------------------------------------------------===//
// Mesh geometry
//===----------------------------------------------------------------------===//

Communicator::~Communicator() = default;

Status Communicator::setMesh(const std::vector<MeshAxisInfo> &mesh) {
  const int64_t want = meshDeviceCount(mesh);
  LOOM_CHECK(want == worldSize,
             "program was compiled for "
                 << meshString(mesh) << " (" << want << " rank"
                 << (want == 1 ? "" : "s") << ") but "
                 << (worldSize == 1 && !launchedUnderMpirun()
                         ? std::string("this run has 1 rank (not under mpirun)")
                         : "mpirun started " + std::to_string(worldSize))
                 << "; use -np " << want
                 << (want > 1 && !runtimeHasMpi()
                         ? " (and a loom-run built with MPI)"
                         : ""));
  meshAxes = mesh;
  meshChanged();
  return Status::success();
}

std::vector<int64_t> Communicator::coordsOf(int r) const {
  std::vector<int64_t> c(meshAxes.size(), 0);
  int64_t rest = r;
  for (size_t a = meshAxes.size(); a-- > 0;) {
    c[a] = rest % meshAxes[a].size;
    rest /= meshAxes[a].size;
  }
  return c;
}

int Communicator::rankOf(const std::vector<int64_t> &c) const {
  int64_t r = 0;
  for (size_t a = 0; a < meshAxes.size(); ++a)
    r = r * meshAxes[a].size + c[a];
  return static_cast<int>(r);
}

int64_t Communicator::coordOn(const std::string &name) const {
  const std::vector<int64_t> c = coords();
  for (size_t a = 0; a < meshAxes.size(); ++a)
    if (meshAxes[a].name == name)
      return c[a];
  return 0;
}

int64_t Communicator::axisSize(const std::string &name) const {
  for (const MeshAxisInfo &a : meshAxes)
    if (a.name == name)
      return a.size;
  return 1;
}

uint64_t Communicator::axesMask(const std::vector<uint32_t> &axes) {
  uint64_t m = 0;
  for (uint32_t a : axes)
    m |= uint64_t(1) << a;
  return m;
}

int64_t Communicator::groupSize(const std::vector<uint32_t> &axes) const {
  int64_t n = 1;
  for (uint32_t a : axes)
    if (a < meshAxes.size())
      n *= meshAxes[a].size;
  return n;
}

int64_t Communicator::groupRank(const std::vector<uint32_t> &axes) const {
  const uint64_t mask = axesMask(axes);
  const std::vector<int64_t> c = coords();
  int64_t r = 0;
  for (size_t a = 0; a < meshAxes.size(); ++a)
    if (mask >> a & 1)
      r = r * meshAxes[a].size + c[a];
  return r;
}

int Communicator::groupMember(const std::vector<uint32_t> &axes,
                              int64_t member) const {
  const uint64_t mask = axesMask(axes);
  std::vector<int64_t> c = coords();
  for (size_t a = meshAxes.size(); a-- > 0;)
    if (mask >> a & 1) {
      c[a] = member % meshAxes[a].size;
      member /= meshAxes[a].size;
    }
  return rankOf(c);
}

int64_t Communicator::blockIndex(const std::vector<uint32_t> &axes) const {
  const std::vector<int64_t> c = coords();
  int64_t r = 0;
  for (uint32_t a : axes)
    if (a < meshAxes.size())
      r = r * meshAxes[a].size + c[a];
  return r;
}

//===----------------------------------------------------------------------===//
// Counting wrappers
//===----------------------------------------------------------------------===//

namespace {
struct CommTimer {
  CommStats &stats;
  int64_t start = steadyNowNs();
  explicit CommTimer(CommStats &s) : stats(s) {}
  ~CommTimer() { stats.commNs += steadyNowNs() - start; }
};
int64_t bytesOf(int64_t count, DType dtype) {
  return count * program::dtypeBytes(dtype);
}
} // namespace

#define COUNT(kind, full, n)                                                   \
  do {                                                                         \
    counters.sentBytes[static_cast<int>(kind)] += ringBytes(kind, full, n);    \
    counters.calls[static_cast<int>(kind)] += 1;                               \
  } while (0)

Status Communicator::allReduce(void *buf, int64_t count, DType dtype,
                               Reduction op,
                               const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  COUNT(CommKind::AllReduce, bytesOf(count, dtype), groupSize(axes));
  if (stagesBuffersThroughHost()) {
    const uint64_t bytes = static_cast<uint64_t>(bytesOf(count, dtype));
    return throughHost(buf, bytes, buf, bytes, [&](const void *, void *h) {
      return doAllReduce(h, count, dtype, op, axes);
    });
  }
  return doAllReduce(buf, count, dtype, op, axes);
}

Status Communicator::startAllReduce(void *buf, int64_t count, DType dtype,
                                    Reduction op,
                                    const std::vector<uint32_t> &axes,
                                    Ticket &ticket) {
  if (stagesBuffersThroughHost()) {
    ticket = -1; // staged: complete when started
    return allReduce(buf, count, dtype, op, axes);
  }
  CommTimer t(counters);
  COUNT(CommKind::AllReduce, bytesOf(count, dtype), groupSize(axes));
  return doStartAllReduce(buf, count, dtype, op, axes, ticket);
}

Status Communicator::startAllGather(const void *in, void *out, int64_t count,
                                    DType dtype,
                                    const std::vector<uint32_t> &axes,
                                    Ticket &ticket) {
  if (stagesBuffersThroughHost()) {
    ticket = -1;
    return allGather(in, out, count, dtype, axes);
  }
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::AllGather, bytesOf(count * n, dtype), n);
  return doStartAllGather(in, out, count, dtype, axes, ticket);
}

Status Communicator::startReduceScatter(const void *in, void *out,
                                        int64_t count, DType dtype,
                                        Reduction op,
                                        const std::vector<uint32_t> &axes,
                                        Ticket &ticket) {
  if (stagesBuffersThroughHost()) {
    ticket = -1;
    return reduceScatter(in, out, count, dtype, op, axes);
  }
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::ReduceScatter, bytesOf(count * n, dtype), n);
  return doStartReduceScatter(in, out, count, dtype, op, axes, ticket);
}

Status Communicator::complete(Ticket ticket) {
  if (ticket < 0)
    return Status::success();
  CommTimer t(counters);
  return doComplete(ticket);
}

Status Communicator::allGather(const void *in, void *out, int64_t count,
                               DType dtype,
                               const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::AllGather, bytesOf(count * n, dtype), n);
  if (stagesBuffersThroughHost()) {
    const uint64_t bytes = static_cast<uint64_t>(bytesOf(count, dtype));
    return throughHost(in, bytes, out, bytes * static_cast<uint64_t>(n),
                       [&](const void *hIn, void *hOut) {
                         return doAllGather(hIn, hOut, count, dtype, axes);
                       });
  }
  return doAllGather(in, out, count, dtype, axes);
}

Status Communicator::reduceScatter(const void *in, void *out, int64_t count,
                                   DType dtype, Reduction op,
                                   const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::ReduceScatter, bytesOf(count * n, dtype), n);
  if (stagesBuffersThroughHost()) {
    const uint64_t bytes = static_cast<uint64_t>(bytesOf(count, dtype));
    return throughHost(in, bytes * static_cast<uint64_t>(n), out, bytes,
                       [&](const void *hIn, void *hOut) {
                         return doReduceScatter(hIn, hOut, count, dtype, op,
                                                axes);
                       });
  }
  return doReduceScatter(in, out, count, dtype, op, axes);
}

Status Communicator::allToAll(const void *in, void *out, int64_t count,
                              DType dtype, const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::AllToAll, bytesOf(count * n, dtype), n);
  if (stagesBuffersThroughHost()) {
    const uint64_t bytes = static_cast<uint64_t>(bytesOf(count * n, dtype));
    return throughHost(in, bytes, out, bytes, [&](const void *hIn, void *hOut) {
      return doAllToAll(hIn, hOut, count, dtype, axes);
    });
  }
  return doAllToAll(in, out, count, dtype, axes);
}

Status Communicator::send(const void *buf, int64_t count, DType dtype,
                          int peer, int64_t tag) {
  CommTimer t(counters);
  LOOM_CHECK(peer >= 0 && peer < worldSize,
             "send to rank " << peer << " of " << worldSize);
  LOOM_CHECK(tag >= 0, "send tag " << tag << " is negative");
  COUNT(CommKind::Send, bytesOf(count, dtype), 2);
  if (stagesBuffersThroughHost())
    // The host transport copies the message when the send starts, so the
    // temporary may be reused at once.
    return throughHost(buf, static_cast<uint64_t>(bytesOf(count, dtype)),
                       nullptr, 0, [&](const void *h, void *) {
                         return doSend(h, count, dtype, peer, tag);
                       });
  return doSend(buf, count, dtype, peer, tag);
}

Status Communicator::recv(void *buf, int64_t count, DType dtype, int peer,
                          int64_t tag) {
  CommTimer t(counters);
  LOOM_CHECK(peer >= 0 && peer < worldSize,
             "recv from rank " << peer << " of " << worldSize);
  LOOM_CHECK(tag >= 0, "recv tag " << tag << " is negative");
  if (stagesBuffersThroughHost())
    return throughHost(nullptr, 0, buf,
                       static_cast<uint64_t>(bytesOf(count, dtype)),
                       [&](const void *, void *h) {
                         return doRecv(h, count, dtype, peer, tag);
                       });
  return doRecv(buf, count, dtype, peer, tag);
}

Status Communicator::allReduceAmong(void *buf, int64_t count, DType dtype,
                                    Reduction op, uint32_t axis,
                                    const std::vector<int64_t> &members) {
  CommTimer t(counters);
  LOOM_CHECK(axis < meshAxes.size(), "mesh axis " << axis
                                                  << " is out of range ("
                                                  << meshAxes.size()
                                                  << " axes)");
  LOOM_CHECK(dtype == DType::F32 || dtype == DType::BF16,
             "an all-reduce among members needs F32 or BF16 data");
  const std::vector<int64_t> mine = coords();
  const auto self = std::find(members.begin(), members.end(), mine[axis]);
  LOOM_CHECK(self != members.end(),
             "rank " << worldRank << " (coordinate " << mine[axis] << " on "
                     << meshAxes[axis].name
                     << ") is not among the members of the all-reduce");
  const int64_t n = static_cast<int64_t>(members.size());
  COUNT(CommKind::AllReduce, bytesOf(count, dtype), n);
  std::vector<int> ranks(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    std::vector<int64_t> c = mine;
    c[axis] = members[k];
    ranks[k] = rankOf(c);
  }
  return doAllReduceAmong(buf, count, dtype, op, ranks,
                          static_cast<size_t>(self - members.begin()));
}

Status Communicator::doAllReduceAmong(void *buf, int64_t count, DType dtype,
                                      Reduction op,
                                      const std::vector<int> &ranks,
                                      size_t self) {
  const int64_t n = static_cast<int64_t>(ranks.size());
  // 1. Every member sends its values to the others (sends are buffered),
  //    2. receives theirs, 3. reduces them in member order, on the host
  //    (buffer values come out through the bound memory and go back in).
  //    BF16 moves as it is and reduces in fp32, rounded once: every member
  //    computes the same bits.
  constexpr int64_t kMembersTag = 32767; // MPI guarantees tags up to 32767
  const size_t bytes = static_cast<size_t>(bytesOf(count, dtype));
  const bool hostBuf = !memory || memory->hostAccessible();
  std::vector<uint8_t> all(bytes * static_cast<size_t>(n));
  uint8_t *own = all.data() + self * bytes;
  if (hostBuf)
    std::memcpy(own, buf, bytes);
  else
    LOOM_RETURN_IF_ERROR(memory->copyOut(own, buf, bytes));
  for (size_t k = 0; k < ranks.size(); ++k)
    if (k != self)
      LOOM_RETURN_IF_ERROR(
          rawSendHost(own, count, dtype, ranks[k], kMembersTag));
  for (size_t k = 0; k < ranks.size(); ++k)
    if (k != self)
      LOOM_RETURN_IF_ERROR(rawRecvHost(all.data() + k * bytes, count, dtype,
                                       ranks[k], kMembersTag));
  const bool bf16 = dtype == DType::BF16;
  auto value = [&](int64_t k, int64_t i) {
    const uint8_t *from = all.data() + k * bytes;
    return bf16 ? bf16ToFloat(reinterpret_cast<const uint16_t *>(from)[i])
                : reinterpret_cast<const float *>(from)[i];
  };
  std::vector<uint8_t> reduced(bytes);
  for (int64_t i = 0; i < count; ++i) {
    float acc = value(0, i);
    for (int64_t k = 1; k < n; ++k) {
      const float v = value(k, i);
      acc = op == Reduction::Max   ? std::max(acc, v)
            : op == Reduction::Min ? std::min(acc, v)
                                   : acc + v;
    }
    if (op == Reduction::Avg)
      acc /= static_cast<float>(n);
    if (bf16)
      reinterpret_cast<uint16_t *>(reduced.data())[i] = floatToBF16(acc);
    else
      reinterpret_cast<float *>(reduced.data())[i] = acc;
  }
  if (hostBuf) {
    std::memcpy(buf, reduced.data(), bytes);
    return Status::success();
  }
  return memory->copyIn(buf, reduced.data(), bytes);
}

//===----------------------------------------------------------------------===//
// Host collectives and staging
//===----------------------------------------------------------------------===//

void Communicator::bindBufferMemory(BufferMemory *m) {
  if (memory && bufferStage)
    memory->release(bufferStage, bufferStageBytes);
  bufferStage = nullptr;
  bufferStageBytes = 0;
  memory = m;
}

bool Communicator::stagesBuffersThroughHost() const {
  return transportsHostMemory() && memory && !memory->hostAccessible();
}

bool Communicator::stagesHostThroughBuffers() const {
  return !transportsHostMemory() && memory && !memory->hostAccessible();
}

Status Communicator::checkHostTransport() const {
  LOOM_CHECK(!requiresBoundMemoryForHost() || memory,
             "the " << backend()
                    << " communicator moves device buffers only: collectives "
                       "on host values need the executor's buffer memory "
                       "(create the executor on this communicator first)");
  return Status::success();
}

Status Communicator::throughHost(
    const void *in, uint64_t inBytes, void *out, uint64_t outBytes,
    const std::function<Status(const void *, void *)> &f) {
  const bool shared = in && in == out;
  const uint64_t outAt = shared ? 0 : inBytes;
  hostStage.resize(static_cast<size_t>(shared ? inBytes : inBytes + outBytes));
  uint8_t *h = hostStage.data();
  if (inBytes > 0)
    LOOM_RETURN_IF_ERROR(memory->copyOut(h, in, inBytes));
  LOOM_RETURN_IF_ERROR(f(h, h + outAt));
  return outBytes > 0 ? memory->copyIn(out, h + outAt, outBytes)
                      : Status::success();
}

Status Communicator::throughBuffers(
    const void *in, uint64_t inBytes, void *out, uint64_t outBytes,
    const std::function<Status(const void *, void *)> &f) {
  const bool shared = in && in == out;
  const uint64_t outAt = shared ? 0 : inBytes;
  // 64-byte aligned halves: the transport may want aligned buffers.
  const uint64_t alignedAt = (outAt + 63) / 64 * 64;
  const uint64_t want = shared ? inBytes : alignedAt + outBytes;
  if (want > bufferStageBytes) {
    if (bufferStage)
      memory->release(bufferStage, bufferStageBytes);
    bufferStage = nullptr;
    bufferStageBytes = 0;
    LOOM_RETURN_IF_ERROR(memory->allocate(want, bufferStage)
                             .withContext("a staging temporary of the " +
                                          std::string(backend()) +
                                          " communicator"));
    bufferStageBytes = want;
  }
  uint8_t *b = bufferStage;
  if (inBytes > 0)
    LOOM_RETURN_IF_ERROR(memory->copyIn(b, in, inBytes));
  LOOM_RETURN_IF_ERROR(f(b, b + (shared ? 0 : alignedAt)));
  return outBytes > 0
             ? memory->copyOut(out, b + (shared ? 0 : alignedAt), outBytes)
             : Status::success();
}

Status Communicator::rawSendHost(const void *buf, int64_t count, DType dtype,
                                 int peer, int64_t tag) {
  LOOM_RETURN_IF_ERROR(checkHostTransport());
  if (stagesHostThroughBuffers())
    return throughBuffers(buf, static_cast<uint64_t>(bytesOf(count, dtype)),
                          nullptr, 0, [&](const void *b, void *) {
                            return doSend(b, count, dtype, peer, tag);
                          });
  return doSend(buf, count, dtype, peer, tag);
}

Status Communicator::rawRecvHost(void *buf, int64_t count, DType dtype,
                                 int peer, int64_t tag) {
  LOOM_RETURN_IF_ERROR(checkHostTransport());
  if (stagesHostThroughBuffers())
    return throughBuffers(nullptr, 0, buf,
                          static_cast<uint64_t>(bytesOf(count, dtype)),
                          [&](const void *, void *b) {
                            return doRecv(b, count, dtype, peer, tag);
                          });
  return doRecv(buf, count, dtype, peer, tag);
}

Status Communicator::allReduceHost(void *buf, int64_t count, DType dtype,
                                   Reduction op,
                                   const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  COUNT(CommKind::AllReduce, bytesOf(count, dtype), groupSize(axes));
  LOOM_RETURN_IF_ERROR(checkHostTransport());
  if (stagesHostThroughBuffers()) {
    const uint64_t bytes = static_cast<uint64_t>(bytesOf(count, dtype));
    return throughBuffers(buf, bytes, buf, bytes, [&](const void *, void *b) {
      return doAllReduce(b, count, dtype, op, axes);
    });
  }
  return doAllReduce(buf, count, dtype, op, axes);
}

Status Communicator::allGatherHost(const void *in, void *out, int64_t count,
                                   DType dtype,
                                   const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::AllGather, bytesOf(count * n, dtype), n);
  LOOM_RETURN_IF_ERROR(checkHostTransport());
  if (stagesHostThroughBuffers()) {
    const uint64_t bytes = static_cast<uint64_t>(bytesOf(count, dtype));
    return throughBuffers(in, bytes, out, bytes * static_cast<uint64_t>(n),
                          [&](const void *bIn, void *bOut) {
                            return doAllGather(bIn, bOut, count, dtype, axes);
                          });
  }
  return doAllGather(in, out, count, dtype, axes);
}

Status Communicator::sendHost(const void *buf, int64_t count, DType dtype,
                              int peer, int64_t tag) {
  CommTimer t(counters);
  LOOM_CHECK(peer >= 0 && peer < worldSize,
             "send to rank " << peer << " of " << worldSize);
  LOOM_CHECK(tag >= 0, "send tag " << tag << " is negative");
  COUNT(CommKind::Send, bytesOf(count, dtype), 2);
  return rawSendHost(buf, count, dtype, peer, tag);
}

Status Communicator::recvHost(void *buf, int64_t count, DType dtype, int peer,
                              int64_t tag) {
  CommTimer t(counters);
  LOOM_CHECK(peer >= 0 && peer < worldSize,
             "recv from rank " << peer << " of " << worldSize);
  LOOM_CHECK(tag >= 0, "recv tag " << tag << " is negative");
  return rawRecvHost(buf, count, dtype, peer, tag);
}

Status Communicator::flush() {
  CommTimer t(counters);
  return doFlush();
}

Status Communicator::barrier() {
  CommTimer t(counters);
  return doBarrier();
}

#undef COUNT

//===----------------------------------------------------------------------===//
// SingleRankCommunicator
//===----------------------------------------------------------------------===//

void SingleRankCommunicator::abort(int code) { std::exit(code); }

Status SingleRankCommunicator::doAllReduce(void *, int64_t, DType, Reduction,
                                           const std::vector<uint32_t> &) {
  return Status::success(); // sum / max / min / avg of one value
}

Status SingleRankCommunicator::copyBytes(void *dst, const void *src,
                                         int64_t bytes) {
  if (dst == src || bytes == 0)
    return Status::success();
  if (memory)
    return memory->copy(dst, src, static_cast<uint64_t>(bytes));
  std::memmove(dst, src, static_cast<size_t>(bytes));
  return Status::success();
}

Status SingleRankCommunicator::doAllGather(const void *in, void *out,
                                           int64_t count, DType dtype,
                                           const std::vector<uint32_t> &) {
  return copyBytes(out, in, bytesOf(count, dtype));
}

Status SingleRankCommunicator::doReduceScatter(const void *in, void *out,
                                               int64_t count, DType dtype,
                                               Reduction,
                                               const std::vector<uint32_t> &) {
  return copyBytes(out, in, bytesOf(count, dtype));
}

Status SingleRankCommunicator::doAllToAll(const void *in, void *out,
                                          int64_t count, DType dtype,
                                          const std::vector<uint32_t> &) {
  return copyBytes(out, in, bytesOf(count, dtype));
}

Status SingleRankCommunicator::doSend(const void *buf, int64_t count,
                                      DType dtype, int, int64_t tag) {
  std::vector<uint8_t> message(static_cast<size_t>(bytesOf(count, dtype)));
  if (memory && !memory->hostAccessible())
    LOOM_RETURN_IF_ERROR(memory->copyOut(message.data(), buf, message.size()));
  else if (!message.empty())
    std::memcpy(message.data(), buf, message.size());
  pending.emplace(tag, std::move(message));
  return Status::success();
}

Status SingleRankCommunicator::doRecv(void *buf, int64_t count, DType dtype,
                                      int, int64_t tag) {
  auto it = pending.find(tag);
  LOOM_CHECK(it != pending.end(),
             "recv with tag " << tag
                              << " on a single rank: no matching send "
                                 "(it would wait forever)");
  LOOM_CHECK(static_cast<int64_t>(it->second.size()) == bytesOf(count, dtype),
             "recv with tag " << tag << " expects " << bytesOf(count, dtype)
                              << " bytes but the send had "
                              << it->second.size());
  if (memory && !memory->hostAccessible())
    LOOM_RETURN_IF_ERROR(
        memory->copyIn(buf, it->second.data(), it->second.size()));
  else if (!it->second.empty())
    std::memcpy(buf, it->second.data(), it->second.size());
  pending.erase(it);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Factory
//===----------------------------------------------------------------------===//

bool launchedUnderMpirun() {
  for (const char *v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE",
                        "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v))
      return true;
  return false;
}

bool runtimeHasMpi() {
#ifdef LOOM_HAVE_MPI
  return true;
#else
  return false;
#endif
}

Status createWorldCommunicator(int *argc, char ***argv,
                               std::unique_ptr<Communicator> &out) {
#ifdef LOOM_HAVE_MPI
  if (launchedUnderMpirun())
    return MpiCommunicator::createWorld(argc, argv, out);
#else
  (void)argc;
  (void)argv;
#endif
  out = std::make_unique<SingleRankCommunicator>();
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Packing
//===----------------------------------------------------------------------===//

void packBlocks(void *dst, const void *src, const std::vector<int64_t> &shape,
                int64_t dim, int64_t n, int64_t elemBytes) {
  int64_t outer = 1, inner = elemBytes;
  for (int64_t d = 0; d < dim; ++d)
    outer *= shape[d];
  for (size_t d = static_cast<size_t>(dim) + 1; d < shape.size(); ++d)
    inner *= shape[d];
  inner *= shape[dim] / n; // bytes of one block row
  const uint8_t *s = static_cast<const uint8_t *>(src);
  uint8_t *o = static_cast<uint8_t *>(dst);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < outer; ++r)
      std::memcpy(o + (j * outer + r) * inner, s + (r * n + j) * inner,
                  static_cast<size_t>(inner));
}

void unpackBlocks(void *dst, const void *src,
                  const std::vector<int64_t> &blockShape, int64_t dim,
                  int64_t n, int64_t elemBytes) {
  int64_t outer = 1, inner = elemBytes;
  for (int64_t d = 0; d < dim; ++d)
    outer *= blockShape[d];
  for (size_t d = static_cast<size_t>(dim); d < blockShape.size(); ++d)
    inner *= blockShape[d];
  const uint8_t *s = static_cast<const uint8_t *>(src);
  uint8_t *o = static_cast<uint8_t *>(dst);
  for (int64_t j = 0; j < n; ++j)
    for (int64_t r = 0; r < outer; ++r)
      std::memcpy(o + (r * n + j) * inner, s + (j * outer + r) * inner,
                  static_cast<size_t>(inner));
}

} // namespace loom
