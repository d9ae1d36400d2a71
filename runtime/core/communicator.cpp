//===- communicator.cpp - Collectives over the device mesh -----*- C++ -*-===//
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
  return doAllReduce(buf, count, dtype, op, axes);
}

Status Communicator::startAllReduce(void *buf, int64_t count, DType dtype,
                                    Reduction op,
                                    const std::vector<uint32_t> &axes,
                                    Ticket &ticket) {
  CommTimer t(counters);
  COUNT(CommKind::AllReduce, bytesOf(count, dtype), groupSize(axes));
  return doStartAllReduce(buf, count, dtype, op, axes, ticket);
}

Status Communicator::startAllGather(const void *in, void *out, int64_t count,
                                    DType dtype,
                                    const std::vector<uint32_t> &axes,
                                    Ticket &ticket) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::AllGather, bytesOf(count * n, dtype), n);
  return doStartAllGather(in, out, count, dtype, axes, ticket);
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
  return doAllGather(in, out, count, dtype, axes);
}

Status Communicator::reduceScatter(const void *in, void *out, int64_t count,
                                   DType dtype, Reduction op,
                                   const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::ReduceScatter, bytesOf(count * n, dtype), n);
  return doReduceScatter(in, out, count, dtype, op, axes);
}

Status Communicator::allToAll(const void *in, void *out, int64_t count,
                              DType dtype, const std::vector<uint32_t> &axes) {
  CommTimer t(counters);
  const int64_t n = groupSize(axes);
  COUNT(CommKind::AllToAll, bytesOf(count * n, dtype), n);
  return doAllToAll(in, out, count, dtype, axes);
}

Status Communicator::send(const void *buf, int64_t count, DType dtype,
                          int peer, int64_t tag) {
  CommTimer t(counters);
  LOOM_CHECK(peer >= 0 && peer < worldSize,
             "send to rank " << peer << " of " << worldSize);
  LOOM_CHECK(tag >= 0, "send tag " << tag << " is negative");
  COUNT(CommKind::Send, bytesOf(count, dtype), 2);
  return doSend(buf, count, dtype, peer, tag);
}

Status Communicator::recv(void *buf, int64_t count, DType dtype, int peer,
                          int64_t tag) {
  CommTimer t(counters);
  LOOM_CHECK(peer >= 0 && peer < worldSize,
             "recv from rank " << peer << " of " << worldSize);
  LOOM_CHECK(tag >= 0, "recv tag " << tag << " is negative");
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
  // 1. Every member sends its values to the others (sends are buffered),
  //    2. receives theirs, 3. reduces them in member order.
  constexpr int64_t kMembersTag = 32767; // MPI guarantees tags up to 32767
  // BF16 moves as it is and reduces in fp32, rounded once: every member
  // computes the same bits.
  const size_t bytes = static_cast<size_t>(bytesOf(count, dtype));
  std::vector<uint8_t> all(bytes * static_cast<size_t>(n));
  std::vector<int> ranks(members.size());
  for (size_t k = 0; k < members.size(); ++k) {
    std::vector<int64_t> c = mine;
    c[axis] = members[k];
    ranks[k] = rankOf(c);
    if (members[k] == mine[axis])
      std::memcpy(all.data() + k * bytes, buf, bytes);
    else
      LOOM_RETURN_IF_ERROR(doSend(buf, count, dtype, ranks[k], kMembersTag));
  }
  for (size_t k = 0; k < members.size(); ++k)
    if (members[k] != mine[axis])
      LOOM_RETURN_IF_ERROR(
          doRecv(all.data() + k * bytes, count, dtype, ranks[k], kMembersTag));
  const bool bf16 = dtype == DType::BF16;
  auto value = [&](int64_t k, int64_t i) {
    return bf16 ? bf16ToFloat(reinterpret_cast<const uint16_t *>(all.data() +
                                                                 k * bytes)[i])
                : reinterpret_cast<const float *>(all.data() + k * bytes)[i];
  };
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
      static_cast<uint16_t *>(buf)[i] = floatToBF16(acc);
    else
      static_cast<float *>(buf)[i] = acc;
  }
  return Status::success();
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

Status SingleRankCommunicator::doAllGather(const void *in, void *out,
                                           int64_t count, DType dtype,
                                           const std::vector<uint32_t> &) {
  if (in != out)
    std::memmove(out, in, static_cast<size_t>(bytesOf(count, dtype)));
  return Status::success();
}

Status SingleRankCommunicator::doReduceScatter(const void *in, void *out,
                                               int64_t count, DType dtype,
                                               Reduction,
                                               const std::vector<uint32_t> &) {
  if (in != out)
    std::memmove(out, in, static_cast<size_t>(bytesOf(count, dtype)));
  return Status::success();
}

Status SingleRankCommunicator::doAllToAll(const void *in, void *out,
                                          int64_t count, DType dtype,
                                          const std::vector<uint32_t> &) {
  if (in != out)
    std::memmove(out, in, static_cast<size_t>(bytesOf(count, dtype)));
  return Status::success();
}

Status SingleRankCommunicator::doSend(const void *buf, int64_t count,
                                      DType dtype, int, int64_t tag) {
  const uint8_t *p = static_cast<const uint8_t *>(buf);
  pending.emplace(tag, std::vector<uint8_t>(p, p + bytesOf(count, dtype)));
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
