//===- MpiTest.cpp - The multi-rank runtime under mpirun -np 4 --*- C++ -*-===//
//
// loom-mpi-tests runs under `mpirun -np 4` (CTest entry loom-mpi-tests).
// Every collective opcode through the executor on the mesh dp=2, tp=2 over
// the groups {dp}, {tp} and {dp, tp}, with non-zero dims, against
// expectations computed from the group's inputs; ZeRO-1's in-place
// last-micro-batch ReduceScatter, ZeRO-2/3's ReduceScatter buckets and
// ZeRO-3's AllGather buckets likewise; LocalSlice over the same
// groups and its AllGather round trip; a send / recv ring; the
// byte counters against the ring formulas; the world-size mismatch error; a
// data-parallel training program on 2 ranks (each half of the world) giving
// the single-rank losses and weights; sharded parameter init and checkpoint
// save / load; ZeRO-sharded AdamW moments of a replicated parameter saved as
// global tensors and loaded back as each rank's block; the tensors of two
// pipeline stages written by rank 0, a shared one once (refused when its
// copies differ). Every rank runs every test; the fixture's TearDown reports a
// failure on any rank on all ranks, and only rank 0 prints and writes
// --gtest_output.
//
//===----------------------------------------------------------------------===//
#include "MpiTestUtil.h"
#include "ProgramTestUtil.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/checkpoint.h"
#include "runtime/core/communicator.h"
#include "runtime/core/executor.h"
#include "runtime/core/param_init.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/comm_mpi.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <unistd.h>

using namespace loom;
using namespace loom::test;

namespace {

void addMesh(fb::ProgramT &p,
             std::vector<std::pair<std::string, int64_t>> axes) {
  for (auto &[name, size] : axes) {
    auto a = std::make_unique<fb::MeshAxisT>();
    a->name = name;
    a->size = size;
    p.mesh.push_back(std::move(a));
  }
}

/// A program on mesh dp=2, tp=2 with one collective in -> out.
std::unique_ptr<fb::ProgramT> oneCollective(fb::Opcode op,
                                            std::vector<int64_t> inShape,
                                            std::vector<int64_t> outShape,
                                            std::vector<uint32_t> axes,
                                            int64_t dim, int64_t dim2,
                                            fb::Reduction red,
                                            std::vector<int64_t> scratch = {},
                                            bool async = false) {
  auto p = emptyProgram(2, 4, 16);
  addMesh(*p, {{"dp", 2}, {"tp", 2}});
  StageBuilder s(*p->stages[0]);
  const uint32_t in = s.buffer("in", inShape);
  const uint32_t out = s.buffer("out", outShape);
  std::vector<uint32_t> scr;
  for (int64_t numel : scratch)
    scr.push_back(s.buffer("scratch", {numel}));
  auto &ins = s.op(op, "c", {in}, {out}, scr);
  ins.async_collective = async;
  ins.axes = axes;
  ins.dim = dim;
  ins.dim2 = dim2;
  ins.reduction = red;
  return p;
}

/// Stores `values` in buffer `b` of `ex` as `dt` (bf16 rounded; the tests'
/// small integers are exact).
void storeAs(Executor &ex, uint32_t b, const std::vector<float> &values,
             fb::DType dt) {
  void *data = ex.bufferData(b);
  if (dt == fb::DType::BF16)
    floatsToBF16(static_cast<uint16_t *>(data), values.data(),
                 static_cast<int64_t>(values.size()));
  else
    std::copy(values.begin(), values.end(), static_cast<float *>(data));
}

/// The first `numel` elements of buffer `b` of `ex`, stored as `dt`.
std::vector<float> loadAs(Executor &ex, uint32_t b, int64_t numel,
                          fb::DType dt) {
  std::vector<float> out(numel);
  const void *data = ex.bufferData(b);
  if (dt == fb::DType::BF16)
    bf16ToFloats(out.data(), static_cast<const uint16_t *>(data), numel);
  else
    std::copy_n(static_cast<const float *>(data), numel, out.begin());
  return out;
}

std::vector<int64_t> unflatten(int64_t flat, const std::vector<int64_t> &s) {
  std::vector<int64_t> idx(s.size());
  for (size_t d = s.size(); d-- > 0;) {
    idx[d] = flat % s[d];
    flat /= s[d];
  }
  return idx;
}
int64_t flatten(const std::vector<int64_t> &idx, const std::vector<int64_t> &s) {
  int64_t f = 0;
  for (size_t d = 0; d < s.size(); ++d)
    f = f * s[d] + idx[d];
  return f;
}
/// The groups of the mesh dp=2, tp=2 the tests run every collective over:
/// {dp}, {tp} and {dp, tp}.
const std::vector<std::vector<uint32_t>> kEveryGroup = {{0}, {1}, {0, 1}};

/// Rank r's input element i.
float inputValue(int r, int64_t i) { return 100.0f * r + static_cast<float>(i); }

struct CollectiveCase {
  fb::Opcode op;
  std::vector<int64_t> in, out;
  std::vector<uint32_t> axes;
  int64_t dim = 0, dim2 = 0;
  fb::Reduction red = fb::Reduction::Sum;
  /// With the scratch the compiler plans for a split of a non-leading
  /// dimension (the blocks rank by rank), so the run needs no memory
  /// beyond the arena; else the runtime stages them in its workspace.
  bool planned = false;
  /// Started in flight, completed at the end of the instruction list.
  bool async = false;
};

/// The scratch the compiler plans for `c` (getScratchTypes): element counts.
std::vector<int64_t> plannedScratch(const CollectiveCase &c, int64_t n) {
  const int64_t numel = program::shapeNumel(c.in);
  const bool blocks = program::shapeNumelBefore(c.in, c.dim) != 1;
  std::vector<int64_t> out;
  if (c.op == fb::Opcode::AllGather && blocks)
    out.push_back(numel * n);
  if ((c.op == fb::Opcode::ReduceScatter || c.op == fb::Opcode::AllToAll) &&
      blocks)
    out.push_back(numel);
  std::vector<int64_t> chunk = c.in;
  chunk[c.dim] /= n;
  if (c.op == fb::Opcode::AllToAll &&
      program::shapeNumelBefore(chunk, c.dim2) != 1)
    out.push_back(numel);
  return out;
}

/// Expected output of `c` on this rank.
std::vector<float> expected(const CollectiveCase &c, const Communicator &comm) {
  const int64_t n = comm.groupSize(c.axes), g = comm.groupRank(c.axes);
  std::vector<int> members;
  for (int64_t m = 0; m < n; ++m)
    members.push_back(comm.groupMember(c.axes, m));
  const int64_t outN = program::shapeNumel(c.out);
  std::vector<float> e(outN);
  auto reduce = [&](auto value) {
    float acc = value(members[0]);
    for (size_t m = 1; m < members.size(); ++m) {
      const float v = value(members[m]);
      switch (c.red) {
      case fb::Reduction::Max:
        acc = std::max(acc, v);
        break;
      case fb::Reduction::Min:
        acc = std::min(acc, v);
        break;
      default:
        acc += v;
      }
    }
    return c.red == fb::Reduction::Avg ? acc / n : acc;
  };
  for (int64_t i = 0; i < outN; ++i) {
    std::vector<int64_t> idx = unflatten(i, c.out);
    switch (c.op) {
    case fb::Opcode::AllReduce:
      e[i] = reduce([&](int r) { return inputValue(r, i); });
      break;
    case fb::Opcode::AllGather: {
      const int64_t j = idx[c.dim] / c.in[c.dim];
      idx[c.dim] %= c.in[c.dim];
      e[i] = inputValue(members[j], flatten(idx, c.in));
      break;
    }
    case fb::Opcode::ReduceScatter: {
      idx[c.dim] += g * c.out[c.dim];
      const int64_t src = flatten(idx, c.in);
      e[i] = reduce([&](int r) { return inputValue(r, src); });
      break;
    }
    case fb::Opcode::AllToAll: {
      std::vector<int64_t> chunk = c.in;
      chunk[c.dim] /= n;
      const int64_t m = idx[c.dim2] / chunk[c.dim2];
      idx[c.dim2] %= chunk[c.dim2];
      idx[c.dim] += g * chunk[c.dim];
      e[i] = inputValue(members[m], flatten(idx, c.in));
      break;
    }
    default:
      break;
    }
  }
  return e;
}

void runCase(Communicator &comm, const CollectiveCase &c) {
  SCOPED_TRACE(fb::opcodeName(c.op) + " axes " +
               std::to_string(c.axes.size()) + " dim " +
               std::to_string(c.dim) + " dim2 " + std::to_string(c.dim2));
  const std::vector<int64_t> scratch =
      c.planned ? plannedScratch(c, comm.groupSize(c.axes))
                : std::vector<int64_t>{};
  auto p = oneCollective(c.op, c.in, c.out, c.axes, c.dim, c.dim2, c.red,
                         scratch, c.async);
  program::LoadedProgram loaded;
  Status s = program::loadProgramBytes(serialize(*p), "c.loom", loaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, 1, ex, &comm);
  ASSERT_TRUE(s.ok()) << s.toString();
  float *in = static_cast<float *>(ex->bufferData(0));
  for (int64_t i = 0; i < ex->bufferNumel(0); ++i)
    in[i] = inputValue(comm.rank(), i);
  s = ex->run();
  ASSERT_TRUE(s.ok()) << s.toString();
  const std::vector<float> want = expected(c, comm);
  const float *out = static_cast<const float *>(ex->bufferData(1));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_FLOAT_EQ(out[i], want[i]) << "element " << i << " rank "
                                     << comm.rank();
  // Planned, the blocks moved through the arena alone.
  if (c.planned) {
    EXPECT_EQ(ex->peakTensorBytes(), ex->arenaBytes())
        << scratch.size() << " scratch buffers";
  }
}

} // namespace

TEST_F(Mpi, MeshGeometry) {
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  const int r = comm->rank();
  EXPECT_EQ(comm->coordOn("dp"), r / 2);
  EXPECT_EQ(comm->coordOn("tp"), r % 2);
  EXPECT_EQ(comm->groupSize({0}), 2);
  EXPECT_EQ(comm->groupRank({0}), r / 2);
  EXPECT_EQ(comm->groupRank({1}), r % 2);
  EXPECT_EQ(comm->groupRank({1, 0}), r);
  EXPECT_EQ(comm->groupMember({0}, 1), 2 + r % 2);
  EXPECT_EQ(comm->groupMember({1}, 0), r / 2 * 2);
  EXPECT_EQ(comm->blockIndex({1, 0}), (r % 2) * 2 + r / 2);
}

TEST_F(Mpi, EveryCollectiveOverEveryGroup) {
  using O = fb::Opcode;
  using R = fb::Reduction;
  for (const std::vector<uint32_t> &axes : kEveryGroup) {
    const int64_t n = axes.size() == 2 ? 4 : 2;
    for (R red : {R::Sum, R::Max, R::Min, R::Avg})
      runCase(*comm, {O::AllReduce, {3, 4}, {3, 4}, axes, 0, 0, red});
    for (int64_t dim : {0, 1, 2}) {
      std::vector<int64_t> in = {2, 3, 4}, out = in;
      out[dim] *= n;
      std::vector<int64_t> rin = {4, 4, 8}, rout = rin;
      rout[dim] /= n;
      // In the runtime's workspace, and through the planned scratch.
      for (bool planned : {false, true}) {
        runCase(*comm,
                {O::AllGather, in, out, axes, dim, 0, R::Sum, planned});
        runCase(*comm, {O::ReduceScatter, rin, rout, axes, dim, 0, R::Sum,
                        planned});
        runCase(*comm, {O::ReduceScatter, rin, rout, axes, dim, 0, R::Avg,
                        planned});
        for (int64_t dim2 : {0, 1, 2}) {
          std::vector<int64_t> aout = rin;
          aout[dim] /= n;
          aout[dim2] *= n;
          runCase(*comm,
                  {O::AllToAll, rin, aout, axes, dim, dim2, R::Sum, planned});
        }
      }
      // In flight (ZeRO-3's prefetch): a spare temporary, or the scratch.
      for (bool planned : {false, true})
        runCase(*comm, {O::AllGather, in, out, axes, dim, 0, R::Sum, planned,
                        /*async=*/true});
    }
  }
}

TEST_F(Mpi, InPlaceReduceScatterLeavesTheRanksBlock) {
  // ZeRO-1's last-micro-batch ReduceScatter, in place: afterwards the input
  // buffer holds this rank's block of `dim` (group-rank order, the block
  // LocalSlice reads) summed over the group, zeros elsewhere, and the
  // received block (scratch[0]) and packed input (scratch[1], a non-leading
  // dim) are the program's. Every group and dim, now and in flight
  // (completed by a Wait), fp32 and bf16 (the MPI bf16 path: all-to-all +
  // fp32 sums). Small integers, exact in bf16.
  using O = fb::Opcode;
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  const std::vector<int64_t> shape = {4, 4, 8};
  auto value = [](int r, int64_t i) {
    return static_cast<float>(4 * r + i % 16);
  };
  for (const std::vector<uint32_t> &axes : kEveryGroup)
    for (int64_t dim : {0, 1, 2})
      for (bool async : {false, true})
        for (fb::DType dt : {fb::DType::F32, fb::DType::BF16}) {
          SCOPED_TRACE("axes " + std::to_string(axes.size()) + " first " +
                       std::to_string(axes[0]) + " dim " +
                       std::to_string(dim) + (async ? " async" : "") +
                       (dt == fb::DType::BF16 ? " bf16" : " f32"));
          const int64_t n = comm->groupSize(axes), g = comm->groupRank(axes);
          const int64_t numel = program::shapeNumel(shape);
          auto p = emptyProgram(2, 4, 16);
          addMesh(*p, {{"dp", 2}, {"tp", 2}});
          StageBuilder s(*p->stages[0]);
          const uint32_t acc = s.buffer("acc", shape, dt);
          std::vector<uint32_t> scratch = {s.buffer("block", {numel / n}, dt)};
          if (dim > 0)
            scratch.push_back(s.buffer("packed", {numel}, dt));
          auto &rs = s.op(O::ReduceScatter, "rs", {acc}, {acc}, scratch);
          rs.axes = axes;
          rs.dim = dim;
          rs.reduction = fb::Reduction::Sum;
          rs.async_collective = async;
          rs.last_microbatch_only = true;
          // In flight, completed by a Wait on the accumulator (as
          // --loom-schedule-comm places one after the next block).
          if (async)
            s.op(O::Wait, "wait", {acc}, {});
          // A training stage (the only place last_microbatch_only belongs).
          makeMinimalTrainingStage(s);
          program::LoadedProgram loaded;
          Status st = program::loadProgramBytes(serialize(*p), "rs", loaded);
          ASSERT_TRUE(st.ok()) << st.toString();
          std::unique_ptr<Executor> ex;
          st = Executor::create(loaded, 0, 1, ex, comm.get());
          ASSERT_TRUE(st.ok()) << st.toString();
          std::vector<float> in(numel);
          for (int64_t i = 0; i < numel; ++i)
            in[i] = value(comm->rank(), i);
          storeAs(*ex, acc, in, dt);
          st = ex->run();
          ASSERT_TRUE(st.ok()) << st.toString();
          const std::vector<float> out = loadAs(*ex, acc, numel, dt);
          // Counted, not asserted element by element: a rank that left
          // the loop early would leave the others waiting in the next
          // case's collective.
          const int64_t extent = shape[dim] / n;
          int64_t wrong = 0, first = -1;
          for (int64_t i = 0; i < numel; ++i) {
            const int64_t at = unflatten(i, shape)[dim];
            float want = 0;
            if (at / extent == g)
              for (int64_t m = 0; m < n; ++m)
                want += value(comm->groupMember(axes, m), i);
            if (out[i] != want && wrong++ == 0)
              first = i;
          }
          EXPECT_EQ(wrong, 0) << "first wrong element " << first << " on rank "
                              << comm->rank();
        }
}

namespace {

/// Runs one bucket instruction `op` (ReduceScatter or AllGather) on
/// `comm` over `axes`, input m split on `dims[m]`: inputs of `inShapes`
/// (element i of input m is `input(m, i)`), outputs `inShapes` with their
/// dimension divided (scatter) or multiplied (gather) by the group size,
/// and the two scratch buffers the verifier asks for; member_dims when the
/// dims differ. `inPlace` (a ReduceScatter): ZeRO-1's last-micro-batch
/// bucket, each output its input, in a training stage, completed by a Wait
/// when async. Returns each output as floats; none when the program does
/// not load or run (a test failure).
std::vector<std::vector<float>>
runBucket(Communicator &comm, fb::Opcode op,
          const std::vector<uint32_t> &axes, const std::vector<int64_t> &dims,
          bool async, fb::DType dt,
          const std::vector<std::vector<int64_t>> &inShapes,
          const std::function<float(int64_t, int64_t)> &input,
          bool inPlace = false) {
  const bool scatter = op == fb::Opcode::ReduceScatter;
  const int64_t n = comm.groupSize(axes);
  auto p = emptyProgram(2, 4, 16);
  addMesh(*p, {{"dp", 2}, {"tp", 2}});
  StageBuilder s(*p->stages[0]);
  std::vector<uint32_t> ins, outs;
  int64_t total = 0;
  for (size_t m = 0; m < inShapes.size(); ++m) {
    std::vector<int64_t> out = inShapes[m];
    const int64_t dim = dims[m];
    out[dim] = scatter ? out[dim] / n : out[dim] * n;
    ins.push_back(s.buffer("in" + std::to_string(m), inShapes[m], dt));
    outs.push_back(inPlace ? ins.back()
                           : s.buffer("out" + std::to_string(m), out, dt));
    total += program::shapeNumel(inShapes[m]);
  }
  // ReduceScatter: [received blocks, packed inputs]; AllGather: [packed
  // shards, gathered shards].
  auto &i = s.op(op, "bucket", ins, outs,
                 {s.buffer("scratch0", {scatter ? total / n : total}, dt),
                  s.buffer("scratch1", {scatter ? total : total * n}, dt)});
  i.axes = axes;
  i.dim = dims[0];
  if (std::adjacent_find(dims.begin(), dims.end(), std::not_equal_to<>()) !=
      dims.end())
    i.member_dims = dims;
  i.reduction = fb::Reduction::Sum;
  i.async_collective = async;
  if (inPlace) {
    i.last_microbatch_only = true;
    if (async)
      s.op(fb::Opcode::Wait, "wait", ins, {});
    makeMinimalTrainingStage(s);
  }
  program::LoadedProgram loaded;
  Status st = program::loadProgramBytes(serialize(*p), "bucket", loaded);
  std::unique_ptr<Executor> ex;
  if (st.ok())
    st = Executor::create(loaded, 0, 1, ex, &comm);
  for (size_t m = 0; st.ok() && m < inShapes.size(); ++m) {
    std::vector<float> values(program::shapeNumel(inShapes[m]));
    for (size_t k = 0; k < values.size(); ++k)
      values[k] = input(static_cast<int64_t>(m), static_cast<int64_t>(k));
    storeAs(*ex, ins[m], values, dt);
  }
  if (st.ok())
    st = ex->run();
  std::vector<std::vector<float>> results;
  if (!st.ok()) {
    ADD_FAILURE() << st.toString();
    return results;
  }
  for (uint32_t b : outs)
    results.push_back(loadAs(*ex, b, program::shapeNumel(
                                         p->stages[0]->buffers[b]->shape),
                             dt));
  return results;
}

/// The members' split dimensions a bucket test case uses: every member on
/// dim 0, every member on dim 1, or each on its own (member_dims).
enum class BucketDims { Leading, Second, Mixed };

/// One bucket's members: their shapes (inputs) and split dimensions.
struct BucketMembers {
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> dims;
};

/// Calls `body` for every group, each BucketDims, now and in flight, fp32
/// and bf16 (the cases the bucket tests cover), under a trace naming it.
void forEveryBucketCase(
    const std::function<void(const std::vector<uint32_t> &, BucketDims, bool,
                             fb::DType)> &body) {
  for (const std::vector<uint32_t> &axes : kEveryGroup)
    for (BucketDims dims :
         {BucketDims::Leading, BucketDims::Second, BucketDims::Mixed})
      for (bool async : {false, true})
        for (fb::DType dt : {fb::DType::F32, fb::DType::BF16}) {
          SCOPED_TRACE("axes " + std::to_string(axes.size()) + " first " +
                       std::to_string(axes[0]) + " dims " +
                       std::to_string(static_cast<int>(dims)) +
                       (async ? " async" : "") +
                       (dt == fb::DType::BF16 ? " bf16" : " f32"));
          body(axes, dims, async, dt);
        }
}

/// The flat index in `inner` (the shape of one block along `dim`) of
/// element `at` of the whole, and the block it falls in.
std::pair<int64_t, int64_t> blockIndex(std::vector<int64_t> at,
                                       const std::vector<int64_t> &inner,
                                       int64_t dim) {
  const int64_t block = at[dim] / inner[dim];
  at[dim] %= inner[dim];
  int64_t local = 0;
  for (size_t d = 0; d < at.size(); ++d)
    local = local * inner[d] + at[d];
  return {block, local};
}

/// The reduce-scatter bucket tests' members, by BucketDims (a non-leading
/// dim packed per outer row or per rank: [3, 8] and [3, 4, 8] have fewer,
/// and more, outer rows than ranks).
const BucketMembers kScatterBucketCases[3] = {
    {{{4, 4, 8}, {8, 4}, {4}}, {0, 0, 0}},
    {{{4, 4, 8}, {8, 4}, {2, 8}}, {1, 1, 1}},
    {{{4, 4, 8}, {3, 8}, {4}, {3, 4, 8}, {8, 4}}, {0, 1, 0, 2, 1}}};

/// Runs every reduce-scatter bucket case (in place: ZeRO-1's) on `comm`
/// and counts the elements that differ from this rank's block of each
/// member's split dimension (group-rank order) summed over the group: the
/// output (in place: the input, zeros in the other blocks). Counted, not
/// asserted element by element (see above). Small integers, exact in bf16.
void expectScatterBucketBlocks(Communicator &comm, bool inPlace) {
  auto value = [](int r, int64_t member, int64_t i) {
    return static_cast<float>(4 * r + 3 * member + i % 11);
  };
  forEveryBucketCase([&](const std::vector<uint32_t> &axes, BucketDims which,
                         bool async, fb::DType dt) {
    const BucketMembers &c = kScatterBucketCases[static_cast<int>(which)];
    const int64_t n = comm.groupSize(axes), g = comm.groupRank(axes);
    const auto outs = runBucket(
        comm, fb::Opcode::ReduceScatter, axes, c.dims, async, dt, c.shapes,
        [&](int64_t m, int64_t i) { return value(comm.rank(), m, i); },
        inPlace);
    int64_t wrong = 0, firstMember = -1, first = -1;
    for (size_t m = 0; m < outs.size(); ++m) {
      const int64_t dim = c.dims[m];
      std::vector<int64_t> block = c.shapes[m];
      block[dim] /= n;
      for (int64_t i = 0; i < program::shapeNumel(c.shapes[m]); ++i) {
        auto [owner, local] = blockIndex(unflatten(i, c.shapes[m]), block, dim);
        if (owner != g && !inPlace)
          continue;
        float want = 0;
        for (int64_t k = 0; owner == g && k < n; ++k)
          want += value(comm.groupMember(axes, k), m, i);
        const int64_t at = inPlace ? i : local;
        if (outs[m][at] != want && wrong++ == 0) {
          firstMember = static_cast<int64_t>(m);
          first = at;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "first wrong element " << first << " of member "
                        << firstMember << " on rank " << comm.rank();
  });
}

} // namespace

TEST_F(Mpi, ReduceScatterBucketLeavesEachMembersBlock) {
  // ZeRO-2/3's bucket of a block's gradients: one ReduceScatter of several
  // values leaves in output i this rank's block of input i's split
  // dimension (group-rank order) summed over the group, however the
  // members' shapes and dimensions differ.
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  expectScatterBucketBlocks(*comm, /*inPlace=*/false);
}

TEST_F(Mpi, InPlaceReduceScatterBucketLeavesEachMembersBlock) {
  // ZeRO-1's last-micro-batch bucket of a block's accumulators, in place:
  // afterwards input i holds this rank's block of its split dimension
  // (the block LocalSlice reads) summed over the group, zeros in the other
  // blocks; in flight it completes at a Wait.
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  expectScatterBucketBlocks(*comm, /*inPlace=*/true);
}

TEST_F(Mpi, AllGatherBucketAssemblesEachMember) {
  // ZeRO-3's bucket of a block's parameters: one AllGather of several
  // shards leaves in output i input i of every group member concatenated
  // along its dimension in group-rank order, however the members' shapes
  // and dimensions differ (non-leading dims unpacked per outer row or per
  // rank). Small integers, exact in bf16.
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  auto value = [](int r, int64_t member, int64_t i) {
    return static_cast<float>(5 * r + 3 * member + i % 7);
  };
  const BucketMembers cases[3] = {
      {{{2, 4, 8}, {3, 4}, {1}}, {0, 0, 0}},
      {{{4, 2, 8}, {8, 1}, {2, 3}}, {1, 1, 1}},
      {{{2, 4, 8}, {3, 2}, {1}, {3, 4, 2}, {8, 1}}, {0, 1, 0, 2, 1}}};
  forEveryBucketCase([&](const std::vector<uint32_t> &axes, BucketDims which,
                         bool async, fb::DType dt) {
    const BucketMembers &c = cases[static_cast<int>(which)];
    const std::vector<std::vector<int64_t>> &shards = c.shapes;
    const int64_t n = comm->groupSize(axes);
    const auto outs = runBucket(
        *comm, fb::Opcode::AllGather, axes, c.dims, async, dt, shards,
        [&](int64_t m, int64_t i) { return value(comm->rank(), m, i); });
    int64_t wrong = 0, firstMember = -1, first = -1;
    for (size_t m = 0; m < outs.size(); ++m) {
      const int64_t dim = c.dims[m];
      std::vector<int64_t> whole = shards[m];
      whole[dim] *= n;
      for (int64_t i = 0; i < program::shapeNumel(whole); ++i) {
        auto [from, local] = blockIndex(unflatten(i, whole), shards[m], dim);
        if (outs[m][i] != value(comm->groupMember(axes, from), m, local) &&
            wrong++ == 0) {
          firstMember = static_cast<int64_t>(m);
          first = i;
        }
      }
    }
    EXPECT_EQ(wrong, 0) << "first wrong element " << first << " of member "
                        << firstMember << " on rank " << comm->rank();
  });
}

TEST_F(Mpi, LocalSliceIsTheInverseOfAllGather) {
  // x is the same on every rank; LocalSlice keeps this rank's block (group
  // rank order) without communicating, and AllGather on the same axes / dim
  // rebuilds x.
  for (const std::vector<uint32_t> &axes : kEveryGroup) {
    for (int64_t dim : {0, 1}) {
      SCOPED_TRACE("axes " + std::to_string(axes.size()) + " first " +
                   std::to_string(axes[0]) + " dim " + std::to_string(dim));
      const std::vector<int64_t> xs = {4, 8};
      auto p = emptyProgram(2, 4, 16);
      addMesh(*p, {{"dp", 2}, {"tp", 2}});
      ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
      const int64_t n = comm->groupSize(axes), b = comm->groupRank(axes);
      std::vector<int64_t> ls = xs;
      ls[dim] /= n;
      StageBuilder s(*p->stages[0]);
      const uint32_t x = s.buffer("x", xs), l = s.buffer("l", ls),
                     g = s.buffer("g", xs);
      auto &slice = s.op(fb::Opcode::LocalSlice, "ls", {x}, {l});
      slice.axes = axes;
      slice.dim = dim;
      auto &gather = s.op(fb::Opcode::AllGather, "ag", {l}, {g});
      gather.axes = axes;
      gather.dim = dim;
      program::LoadedProgram loaded;
      Status st = program::loadProgramBytes(serialize(*p), "ls.loom", loaded);
      ASSERT_TRUE(st.ok()) << st.toString();
      std::unique_ptr<Executor> ex;
      st = Executor::create(loaded, 0, 1, ex, comm.get());
      ASSERT_TRUE(st.ok()) << st.toString();
      float *xv = static_cast<float *>(ex->bufferData(x));
      for (int64_t i = 0; i < 32; ++i)
        xv[i] = 0.25f * static_cast<float>(i) - 3.0f;
      comm->resetStats();
      st = ex->run();
      ASSERT_TRUE(st.ok()) << st.toString();
      const float *lv = static_cast<const float *>(ex->bufferData(l));
      for (int64_t i = 0; i < program::shapeNumel(ls); ++i) {
        std::vector<int64_t> idx = unflatten(i, ls);
        idx[dim] += b * ls[dim];
        ASSERT_EQ(lv[i], xv[flatten(idx, xs)])
            << "element " << i << " rank " << comm->rank();
      }
      const float *gv = static_cast<const float *>(ex->bufferData(g));
      for (int64_t i = 0; i < 32; ++i)
        ASSERT_EQ(gv[i], xv[i]) << "element " << i << " rank " << comm->rank();
      // Only the AllGather communicated.
      const CommStats &stats = comm->stats();
      for (int k = 0; k < kNumCommKinds; ++k)
        EXPECT_EQ(stats.calls[k],
                  k == static_cast<int>(CommKind::AllGather) ? 1 : 0)
            << commKindName(static_cast<CommKind>(k));
      EXPECT_EQ(stats.sentBytes[static_cast<int>(CommKind::AllGather)],
                ringBytes(CommKind::AllGather, 32 * 4, n));
    }
  }
}

TEST_F(Mpi, SendRecvRing) {
  // Mesh ring=4: rank r sends to r+1 and receives from r-1 (per-rank
  // programs: peers are absolute coordinates).
  const int r = comm->rank();
  auto p = emptyProgram(2, 4, 16);
  addMesh(*p, {{"ring", 4}});
  StageBuilder s(*p->stages[0]);
  const uint32_t a = s.buffer("a", {5}), b = s.buffer("b", {5});
  auto &send = s.op(fb::Opcode::Send, "send", {a}, {});
  send.axes = {0};
  send.peer = (r + 1) % 4;
  send.tag = 3;
  auto &recv = s.op(fb::Opcode::Recv, "recv", {}, {b});
  recv.axes = {0};
  recv.peer = (r + 3) % 4;
  recv.tag = 3;
  program::LoadedProgram loaded;
  ASSERT_TRUE(program::loadProgramBytes(serialize(*p), "ring", loaded).ok());
  std::unique_ptr<Executor> ex;
  Status st = Executor::create(loaded, 0, 1, ex, comm.get());
  ASSERT_TRUE(st.ok()) << st.toString();
  for (int i = 0; i < 5; ++i)
    static_cast<float *>(ex->bufferData(a))[i] = inputValue(r, i);
  st = ex->run();
  ASSERT_TRUE(st.ok()) << st.toString();
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(static_cast<float *>(ex->bufferData(b))[i],
              inputValue((r + 3) % 4, i));
  EXPECT_EQ(comm->stats().sentBytes[static_cast<int>(CommKind::Send)], 20);
  // The communicator directly: two tags out of order.
  std::vector<int32_t> x = {r, r + 10}, y = {r * 7}, gx(2), gy(1);
  ASSERT_TRUE(comm->send(x.data(), 2, fb::DType::I32, (r + 1) % 4, 1).ok());
  ASSERT_TRUE(comm->send(y.data(), 1, fb::DType::I32, (r + 1) % 4, 2).ok());
  ASSERT_TRUE(comm->recv(gy.data(), 1, fb::DType::I32, (r + 3) % 4, 2).ok());
  ASSERT_TRUE(comm->recv(gx.data(), 2, fb::DType::I32, (r + 3) % 4, 1).ok());
  ASSERT_TRUE(comm->flush().ok());
  const int prev = (r + 3) % 4;
  EXPECT_EQ(gx, (std::vector<int32_t>{prev, prev + 10}));
  EXPECT_EQ(gy[0], prev * 7);
}

// LOOM_CHECK_P2P_ORDER=1: a recv that is not for the peer's earliest unread
// message (what NCCL, matching by order alone, would deliver) is an error
// naming both tags; in order, the same messages arrive as usual.
TEST_F(Mpi, P2POrderCheckRefusesWhatNcclWouldMismatch) {
  setenv("LOOM_CHECK_P2P_ORDER", "1", 1);
  std::unique_ptr<Communicator> checked;
  Status made = MpiCommunicator::create(MPI_COMM_WORLD, checked);
  unsetenv("LOOM_CHECK_P2P_ORDER");
  ASSERT_TRUE(made.ok()) << made.toString();
  const int r = checked->rank(), next = (r + 1) % 4, prev = (r + 3) % 4;
  std::vector<int32_t> x = {r}, y = {r + 10}, gx(1), gy(1);
  ASSERT_TRUE(checked->send(x.data(), 1, fb::DType::I32, next, 1).ok());
  ASSERT_TRUE(checked->send(y.data(), 1, fb::DType::I32, next, 2).ok());
  Status bad = checked->recv(gy.data(), 1, fb::DType::I32, prev, 2);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.toString().find("receives tag 2 from rank " +
                                std::to_string(prev) +
                                ", but that rank's next message to it has "
                                "tag 1"),
            std::string::npos)
      << bad.toString();
  ASSERT_TRUE(checked->recv(gx.data(), 1, fb::DType::I32, prev, 1).ok());
  ASSERT_TRUE(checked->recv(gy.data(), 1, fb::DType::I32, prev, 2).ok());
  ASSERT_TRUE(checked->flush().ok());
  EXPECT_EQ(gx[0], prev);
  EXPECT_EQ(gy[0], prev + 10);
}

// A pipeline's shared parameter: on a dp=2 x pp=2 mesh the first and the
// last pipeline stage of each dp replica sum their values (pp coordinates 0
// and 1 as members); both get the same bits, the other replica's values
// stay out, and it counts as an all-reduce of two.
TEST_F(Mpi, AllReduceAmongMembers) {
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"pp", 2}}).ok());
  const std::vector<int64_t> c = comm->coords();
  std::vector<float> buf(6);
  for (int i = 0; i < 6; ++i)
    buf[i] = inputValue(comm->rank(), i);
  comm->resetStats();
  Status s = comm->allReduceAmong(buf.data(), 6, fb::DType::F32,
                                  fb::Reduction::Sum, 1, {0, 1});
  ASSERT_TRUE(s.ok()) << s.toString();
  ASSERT_TRUE(comm->flush().ok());
  const int first = comm->rankOf({c[0], 0}), last = comm->rankOf({c[0], 1});
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(buf[i], inputValue(first, i) + inputValue(last, i)) << i;
  EXPECT_EQ(comm->stats().sentBytes[static_cast<int>(CommKind::AllReduce)],
            ringBytes(CommKind::AllReduce, 24, 2));
  // Only members may call it.
  s = comm->allReduceAmong(buf.data(), 6, fb::DType::F32, fb::Reduction::Sum,
                           1, {c[1]});
  ASSERT_TRUE(s.ok()) << s.toString(); // a group of one: nothing to do
  s = comm->allReduceAmong(buf.data(), 6, fb::DType::F32, fb::Reduction::Sum,
                           1, {1 - c[1]});
  EXPECT_NE(s.message().find("is not among the members"), std::string::npos)
      << s.message();
}

TEST_F(Mpi, ByteCountersFollowTheRingFormulas) {
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  std::vector<float> buf(24, 1.0f), big(96);
  comm->resetStats();
  ASSERT_TRUE(comm->allReduce(buf.data(), 24, fb::DType::F32,
                              fb::Reduction::Sum, {0, 1})
                  .ok());
  ASSERT_TRUE(
      comm->allGather(buf.data(), big.data(), 24, fb::DType::F32, {0}).ok());
  ASSERT_TRUE(comm->reduceScatter(big.data(), buf.data(), 12, fb::DType::F32,
                                  fb::Reduction::Sum, {1})
                  .ok());
  ASSERT_TRUE(
      comm->allToAll(big.data(), buf.data(), 6, fb::DType::F32, {0, 1}).ok());
  const auto &sent = comm->stats().sentBytes;
  const int64_t S = 96; // 24 floats
  EXPECT_EQ(sent[static_cast<int>(CommKind::AllReduce)], 2 * 3 * S / 4);
  EXPECT_EQ(sent[static_cast<int>(CommKind::AllGather)], 1 * (2 * S) / 2);
  EXPECT_EQ(sent[static_cast<int>(CommKind::ReduceScatter)], 1 * S / 2);
  EXPECT_EQ(sent[static_cast<int>(CommKind::AllToAll)], 3 * S / 4);
  EXPECT_GT(comm->stats().commNs, 0);
  // A program's collective counts the same way.
  comm->resetStats();
  runCase(*comm, {fb::Opcode::AllReduce, {4, 6}, {4, 6}, {0}});
  EXPECT_EQ(sent[static_cast<int>(CommKind::AllReduce)], 2 * 1 * 96 / 2);
}

// DDP's overlap: two all-reduces started, compute in between, completed in
// the other order; results and byte counts as if run one by one, and the
// buffers untouched... until completion.
TEST_F(Mpi, StartedAllReducesCompleteInAnyOrder) {
  ASSERT_TRUE(comm->setMesh({{"dp", 4}}).ok());
  const int r = comm->rank();
  std::vector<float> a(1000, static_cast<float>(r + 1)), b(7, 2.0f * r);
  comm->resetStats();
  Communicator::Ticket ta = -1, tb = -1;
  ASSERT_TRUE(comm->startAllReduce(a.data(), 1000, fb::DType::F32,
                                   fb::Reduction::Sum, {0}, ta)
                  .ok());
  ASSERT_TRUE(comm->startAllReduce(b.data(), 7, fb::DType::F32,
                                   fb::Reduction::Avg, {0}, tb)
                  .ok());
  EXPECT_GE(ta, 0);
  EXPECT_GE(tb, 0);
  EXPECT_NE(ta, tb);
  double busy = 0; // "the rest of backward"
  for (int i = 0; i < 100000; ++i)
    busy += i * 1e-9;
  comm->progress();
  ASSERT_TRUE(comm->complete(tb).ok());
  ASSERT_TRUE(comm->complete(ta).ok());
  EXPECT_GT(busy, 0);
  for (float v : a)
    ASSERT_EQ(v, 1 + 2 + 3 + 4);
  for (float v : b)
    ASSERT_FLOAT_EQ(v, (0 + 2 + 4 + 6) / 4.0f);
  const auto &sent = comm->stats().sentBytes;
  EXPECT_EQ(sent[static_cast<int>(CommKind::AllReduce)],
            2 * 3 * 4000 / 4 + 2 * 3 * 28 / 4);
  EXPECT_EQ(comm->stats().calls[static_cast<int>(CommKind::AllReduce)], 2);
  // A started all-gather (ZeRO-3 prefetch) fills its output on completion.
  std::vector<int32_t> mine{r, 10 * r}, all(8, -1);
  Communicator::Ticket tg = -1;
  ASSERT_TRUE(
      comm->startAllGather(mine.data(), all.data(), 2, fb::DType::I32, {0}, tg)
          .ok());
  comm->progress();
  ASSERT_TRUE(comm->complete(tg).ok());
  EXPECT_EQ(all, (std::vector<int32_t>{0, 0, 1, 10, 2, 20, 3, 30}));
  // Started reduce-scatters (ZeRO-2/3's gradients behind the next block):
  // block r of the sum, or of the average, on completion; counted as the
  // synchronous one is.
  std::vector<float> grad(8), sum(2, -1), mean(2, -1);
  for (int i = 0; i < 8; ++i)
    grad[i] = static_cast<float>(10 * r + i);
  comm->resetStats();
  Communicator::Ticket ts = -1, tm = -1;
  ASSERT_TRUE(comm->startReduceScatter(grad.data(), sum.data(), 2,
                                       fb::DType::F32, fb::Reduction::Sum, {0},
                                       ts)
                  .ok());
  ASSERT_TRUE(comm->startReduceScatter(grad.data(), mean.data(), 2,
                                       fb::DType::F32, fb::Reduction::Avg, {0},
                                       tm)
                  .ok());
  comm->progress();
  ASSERT_TRUE(comm->complete(tm).ok());
  ASSERT_TRUE(comm->complete(ts).ok());
  for (int i = 0; i < 2; ++i) {
    const float total = 10.0f * (0 + 1 + 2 + 3) + 4.0f * (2 * r + i);
    EXPECT_EQ(sum[i], total) << i;
    EXPECT_FLOAT_EQ(mean[i], total / 4) << i;
  }
  EXPECT_EQ(comm->stats().sentBytes[static_cast<int>(CommKind::ReduceScatter)],
            2 * 3 * 32 / 4);
  EXPECT_EQ(comm->stats().calls[static_cast<int>(CommKind::ReduceScatter)], 2);
  // A ticket completes once.
  Status again = comm->complete(ta);
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("no collective in flight"), std::string::npos)
      << again.message();
}

TEST_F(Mpi, WorldSizeMismatchIsAClearError) {
  Status s = comm->setMesh({{"dp", 2}, {"tp", 1}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("program was compiled for dp=2,tp=1 (2 ranks) "
                             "but mpirun started 4; use -np 2"),
            std::string::npos)
      << s.message();
}

namespace {

/// Global batch `step` of a synthetic token stream: rows x (T + 1).
void syntheticBatch(int64_t step, int64_t rows, int64_t T, int64_t V,
                    std::vector<int32_t> &in, std::vector<int32_t> &tgt) {
  in.resize(rows * T);
  tgt.resize(rows * T);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t t = 0; t < T; ++t) {
      auto tok = [&](int64_t k) {
        return static_cast<int32_t>((step * 131 + r * 17 + k * 7 + k * k) % V);
      };
      in[r * T + t] = tok(t);
      tgt[r * T + t] = tok(t + 1);
    }
}

} // namespace

TEST_F(Mpi, DataParallelTrainingMatchesSingleRank) {
  // Two data-parallel jobs of 2 ranks: world ranks {0, 1} and {2, 3}.
  std::unique_ptr<Communicator> dp;
  ASSERT_NO_FATAL_FAILURE(joinHalfJob(dp));
  const int d = dp->rank();

  MiniGptDims global; // B = 4 rows per step
  global.B = 4;
  // Single rank: the global batch in 2 micro-batches of 2 rows.
  MiniGptTrainOptions refOpts;
  refOpts.microbatches = 2;
  auto ref = miniGptTrain(global, refOpts);
  // Data parallel: 2 rows per rank, one micro-batch; gradients and the loss
  // averaged over dp.
  MiniGptDims local = global;
  local.B = 2;
  auto par = miniGptTrain(local);
  makeDataParallel(*par, 2);
  program::LoadedProgram refLoaded, parLoaded;
  Status s = program::loadProgramBytes(serialize(*ref), "ref", refLoaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  s = program::loadProgramBytes(serialize(*par), "dp", parLoaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::unique_ptr<Executor> refEx, parEx;
  ASSERT_TRUE(Executor::create(refLoaded, 0, 42, refEx).ok());
  s = Executor::create(parLoaded, 0, 42, parEx, dp.get());
  ASSERT_TRUE(s.ok()) << s.toString();
  EXPECT_EQ(parEx->localBatch(), 2);

  std::vector<int32_t> in, tgt;
  for (int64_t step = 1; step <= 3; ++step) {
    syntheticBatch(step, 4, global.T, global.V, in, tgt);
    TrainStepResult a, b;
    s = refEx->trainStep(in.data(), tgt.data(), step, 1e-2f, a);
    ASSERT_TRUE(s.ok()) << s.toString();
    // Rank d takes rows [2d, 2d + 2).
    s = parEx->trainStep(in.data() + d * 2 * global.T,
                         tgt.data() + d * 2 * global.T, step, 1e-2f, b);
    ASSERT_TRUE(s.ok()) << s.toString();
    EXPECT_NEAR(b.loss, a.loss, 1e-5 * std::fabs(a.loss)) << "step " << step;
    EXPECT_NEAR(b.gradNorm, a.gradNorm, 1e-5 * std::fabs(a.gradNorm) + 1e-7);
  }
  for (size_t k = 0; k < refEx->params().size(); ++k) {
    const ParamView &p = refEx->params()[k], &q = parEx->params()[k];
    ASSERT_EQ(p.name, q.name);
    const float *x = static_cast<const float *>(refEx->bufferData(p.buffer));
    const float *y = static_cast<const float *>(parEx->bufferData(q.buffer));
    for (int64_t i = 0; i < refEx->bufferNumel(p.buffer); ++i) {
      // The key bias (c_attn.bias [C, 2C)) has an exactly zero gradient in
      // exact arithmetic (softmax ignores a constant added to every key);
      // AdamW's g / sqrt(v) turns its rounding noise into lr-sized steps
      // that differ with the summation order. Skip it.
      if (p.name == "h.0.attn.c_attn.bias" && i >= global.C && i < 2 * global.C)
        continue;
      ASSERT_NEAR(y[i], x[i], 1e-5 * std::fabs(x[i]) + 1e-6)
          << p.name << "[" << i << "]";
    }
  }
  // 3 steps x 16 params all-reduced over 2 ranks, plus the loss per step.
  EXPECT_GT(dp->stats().sentBytes[static_cast<int>(CommKind::AllReduce)], 0);
}

TEST_F(Mpi, LastMicrobatchReductionsRunOncePerStep) {
  // DDP's no_sync: the same 2-rank step with 2 micro-batches, its gradient
  // all-reduces once at the start of the update, or in the micro-batch
  // instructions flagged last_microbatch_only. The runtime must skip them
  // in the first micro-batch (the accumulators stay local) and run them
  // once after the last: then both give bitwise the same losses, norms and
  // weights and send the same bytes (running them in every micro-batch
  // would send twice as much and sum the first micro-batch twice).
  // The same in a one-stage pipeline, where the reductions run in the
  // chunk's backward of the last micro-batch.
  std::unique_ptr<Communicator> dp;
  ASSERT_NO_FATAL_FAILURE(joinHalfJob(dp));
  const int d = dp->rank();
  for (bool pipelined : {false, true}) {
    SCOPED_TRACE(pipelined ? "pipelined" : "unpipelined");
    MiniGptDims local; // 2 rows per rank, 1 per micro-batch
    local.B = 2;
    MiniGptTrainOptions o;
    o.microbatches = 2;
    auto inUpdate = miniGptTrain(local, o);
    makeDataParallel(*inUpdate, 2);
    auto inLast = miniGptTrain(local, o);
    makeDataParallel(*inLast, 2);
    reduceGradientsInLastMicrobatch(*inLast);
    if (pipelined) {
      makeSingleChunkPipeline(*inUpdate);
      makeSingleChunkPipeline(*inLast);
    }
    program::LoadedProgram updateLoaded, lastLoaded;
    Status s = program::loadProgramBytes(serialize(*inUpdate), "update",
                                         updateLoaded);
    ASSERT_TRUE(s.ok()) << s.toString();
    s = program::loadProgramBytes(serialize(*inLast), "last", lastLoaded);
    ASSERT_TRUE(s.ok()) << s.toString();
    std::unique_ptr<Executor> updateEx, lastEx;
    ASSERT_TRUE(Executor::create(updateLoaded, 0, 42, updateEx, dp.get()).ok());
    ASSERT_TRUE(Executor::create(lastLoaded, 0, 42, lastEx, dp.get()).ok());

    const int allReduce = static_cast<int>(CommKind::AllReduce);
    std::vector<int32_t> in, tgt;
    for (int64_t step = 1; step <= 3; ++step) {
      syntheticBatch(step, 4, local.T, local.V, in, tgt);
      const int32_t *rows = in.data() + d * 2 * local.T;
      const int32_t *targets = tgt.data() + d * 2 * local.T;
      TrainStepResult a, b;
      const int64_t before = dp->stats().sentBytes[allReduce];
      s = updateEx->trainStep(rows, targets, step, 1e-2f, a);
      ASSERT_TRUE(s.ok()) << s.toString();
      const int64_t middle = dp->stats().sentBytes[allReduce];
      s = lastEx->trainStep(rows, targets, step, 1e-2f, b);
      ASSERT_TRUE(s.ok()) << s.toString();
      const int64_t after = dp->stats().sentBytes[allReduce];
      EXPECT_EQ(b.loss, a.loss) << "step " << step;
      EXPECT_EQ(b.gradNorm, a.gradNorm) << "step " << step;
      EXPECT_GT(middle - before, 0);
      EXPECT_EQ(after - middle, middle - before) << "step " << step;
    }
    for (size_t k = 0; k < updateEx->params().size(); ++k) {
      const ParamView &p = updateEx->params()[k], &q = lastEx->params()[k];
      ASSERT_EQ(p.name, q.name);
      const float *x =
          static_cast<const float *>(updateEx->bufferData(p.buffer));
      const float *y = static_cast<const float *>(lastEx->bufferData(q.buffer));
      for (int64_t i = 0; i < updateEx->bufferNumel(p.buffer); ++i)
        ASSERT_EQ(y[i], x[i]) << p.name << "[" << i << "]";
    }
  }
}

TEST_F(Mpi, ShardedParamsInitAndCheckpoint) {
  // w [8, 6]: dim 0 over dp, dim 1 over tp -> local [4, 3]; b [8] over
  // {dp, tp} -> local [2]; training buffers give m / v to save as well.
  auto p = emptyProgram(2, 4, 16);
  addMesh(*p, {{"dp", 2}, {"tp", 2}});
  StageBuilder s(*p->stages[0]);
  s.slicedParam("w", {8, 6}, {}, {4, 3});
  s.slicedParam("b", {8}, {}, {2});
  auto shard = [&](size_t k, std::vector<std::vector<uint32_t>> dims) {
    for (auto &axes : dims) {
      auto ds = std::make_unique<fb::DimShardingT>();
      ds->axes = axes;
      s.stage.params[k]->sharding.push_back(std::move(ds));
    }
  };
  shard(0, {{0}, {1}});
  shard(1, {{0, 1}});
  program::LoadedProgram loaded;
  Status st = program::loadProgramBytes(serialize(*p), "sharded", loaded);
  ASSERT_TRUE(st.ok()) << st.toString();
  std::unique_ptr<Executor> ex;
  st = Executor::create(loaded, 0, 5, ex, comm.get());
  ASSERT_TRUE(st.ok()) << st.toString();
  const int r = comm->rank(), dpc = r / 2, tpc = r % 2;
  // The unsharded values.
  ParamInitializer init;
  init.kind = ParamInitializer::Kind::Normal;
  init.std = 0.2f;
  std::vector<float> w(48), b(8);
  ASSERT_TRUE(initParamSlice(w.data(), "w", 5, init, {8, 6}, {0, 0}, {8, 6}).ok());
  ASSERT_TRUE(initParamSlice(b.data(), "b", 5, init, {8}, {0}, {8}).ok());
  const float *lw = static_cast<const float *>(ex->bufferData(0));
  const float *lb = static_cast<const float *>(ex->bufferData(1));
  EXPECT_EQ(ex->params()[0].sliceOffset, (std::vector<int64_t>{4 * dpc, 3 * tpc}));
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      ASSERT_EQ(lw[i * 3 + j], w[(4 * dpc + i) * 6 + 3 * tpc + j]);
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(lb[i], b[2 * r + i]);
  // Save: rank 0 writes the global tensors.
  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string path =
      "/tmp/loom_mpi_test_" + std::to_string(pid) + ".safetensors";
  st = saveCheckpoint(*ex, path);
  ASSERT_TRUE(st.ok()) << st.toString();
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) {
    SafetensorsFile file;
    ASSERT_TRUE(readSafetensors(path, file).ok());
    const SafeTensor *tw = file.find("w"), *tb = file.find("b");
    ASSERT_TRUE(tw && tb);
    EXPECT_EQ(tw->shape, (std::vector<int64_t>{8, 6}));
    std::vector<float> vw, vb;
    ASSERT_TRUE(toFloat32(*tw, vw).ok());
    ASSERT_TRUE(toFloat32(*tb, vb).ok());
    EXPECT_EQ(vw, w);
    EXPECT_EQ(vb, b);
  }
  // Load gives each rank its slice back.
  std::fill(const_cast<float *>(lw), const_cast<float *>(lw) + 12, 0.0f);
  st = loadCheckpoint(*ex, path);
  ASSERT_TRUE(st.ok()) << st.toString();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      ASSERT_EQ(lw[i * 3 + j], w[(4 * dpc + i) * 6 + 3 * tpc + j]);
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0)
    std::remove(path.c_str());
}

TEST_F(Mpi, ZeroShardedMomentsCheckpoint) {
  // ZeRO-1 on two jobs of 2 ranks (world {0, 1} and {2, 3}), mesh dp=2:
  // w [4, 3] is replicated, its gradient too, but m / v hold rows
  // [2d, 2d + 2) on dp rank d (moment_sharding: dim 0 over dp).
  const int r = comm->rank();
  std::unique_ptr<Communicator> dp;
  ASSERT_NO_FATAL_FAILURE(joinHalfJob(dp));
  const int d = dp->rank();

  auto p = emptyProgram(2, 4, 16);
  addMesh(*p, {{"dp", 2}});
  StageBuilder s(*p->stages[0]);
  const uint32_t w = s.param("w", {4, 3});
  auto &param = *s.stage.params.back();
  param.grad_buffer = static_cast<int32_t>(s.buffer("grad.w", {4, 3}));
  const uint32_t m = s.buffer("m.w", {2, 3}), v = s.buffer("v.w", {2, 3});
  param.m_buffer = static_cast<int32_t>(m);
  param.v_buffer = static_cast<int32_t>(v);
  for (std::vector<uint32_t> axes : {std::vector<uint32_t>{0}, {}}) {
    auto ds = std::make_unique<fb::DimShardingT>();
    ds->axes = axes;
    param.moment_sharding.push_back(std::move(ds));
  }
  // A training program: an update list and the lr / step scalars.
  s.stage.lr = static_cast<int32_t>(s.buffer("lr", {}));
  s.stage.step = static_cast<int32_t>(s.buffer("step", {}));
  s.updateOp(fb::Opcode::Fill, "noop", {}, {s.buffer("scratch", {})}).value =
      1.0;
  program::LoadedProgram loaded;
  Status st = program::loadProgramBytes(serialize(*p), "zero1", loaded);
  ASSERT_TRUE(st.ok()) << st.toString();
  std::unique_ptr<Executor> ex;
  st = Executor::create(loaded, 0, 5, ex, dp.get());
  ASSERT_TRUE(st.ok()) << st.toString();
  ASSERT_TRUE(ex->isTraining());
  const ParamView &pv = ex->params()[0];
  EXPECT_FALSE(pv.sharded());
  EXPECT_EQ(pv.momentSharding,
            (std::vector<std::vector<uint32_t>>{{0}, {}}));
  const ParamView mv = momentView(*ex, pv);
  EXPECT_EQ(mv.localShape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(mv.sliceOffset, (std::vector<int64_t>{2 * d, 0}));

  // Global moments: m[i][j] = 10 i + j + 0.5, v[i][j] = 100 + i * 3 + j.
  auto gm = [](int i, int j) { return 10.0f * i + j + 0.5f; };
  auto gv = [](int i, int j) { return 100.0f + 3 * i + j; };
  float *lm = static_cast<float *>(ex->bufferData(m));
  float *lv = static_cast<float *>(ex->bufferData(v));
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      lm[i * 3 + j] = gm(2 * d + i, j);
      lv[i * 3 + j] = gv(2 * d + i, j);
    }
  std::vector<float> weights(
      static_cast<const float *>(ex->bufferData(w)),
      static_cast<const float *>(ex->bufferData(w)) + 12);

  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string path = "/tmp/loom_mpi_zero_" + std::to_string(pid) + "_" +
                           std::to_string(r / 2) + ".safetensors";
  st = saveCheckpoint(*ex, path, 7);
  ASSERT_TRUE(st.ok()) << st.toString();
  MPI_Barrier(MPI_COMM_WORLD);
  if (d == 0) {
    SafetensorsFile file;
    ASSERT_TRUE(readSafetensors(path, file).ok());
    const SafeTensor *tw = file.find("w"), *tm = file.find(expAvgName("w")),
                     *tv = file.find(expAvgSqName("w"));
    ASSERT_TRUE(tw && tm && tv);
    EXPECT_EQ(tm->shape, (std::vector<int64_t>{4, 3}));
    EXPECT_EQ(tv->shape, (std::vector<int64_t>{4, 3}));
    std::vector<float> vw, vm, vv;
    ASSERT_TRUE(toFloat32(*tw, vw).ok());
    ASSERT_TRUE(toFloat32(*tm, vm).ok());
    ASSERT_TRUE(toFloat32(*tv, vv).ok());
    EXPECT_EQ(vw, weights);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) {
        EXPECT_EQ(vm[i * 3 + j], gm(i, j)) << i << "," << j;
        EXPECT_EQ(vv[i * 3 + j], gv(i, j)) << i << "," << j;
      }
    EXPECT_EQ(file.metadata["step"], "7");
  }
  // Load: each rank takes its rows of the global moments back.
  std::fill(lm, lm + 6, 0.0f);
  std::fill(lv, lv + 6, 0.0f);
  int64_t steps = 0;
  st = loadCheckpoint(*ex, path, &steps);
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_EQ(steps, 7);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      EXPECT_EQ(lm[i * 3 + j], gm(2 * d + i, j)) << "rank " << r;
      EXPECT_EQ(lv[i * 3 + j], gv(2 * d + i, j)) << "rank " << r;
    }
  MPI_Barrier(MPI_COMM_WORLD);
  if (d == 0)
    std::remove(path.c_str());
}

TEST_F(Mpi, PipelineStagesCheckpointToRankZero) {
  // Mesh dp=2, pp=2: stage 0 holds "shared" and "a", stage 1 holds "b" and
  // "shared" (as GPT-2's tied wte on the first and the last stage). Each
  // stage's lead sends its tensors to rank 0, which writes every tensor
  // once; when the stages' copies of "shared" differ, rank 0 refuses.
  auto p = emptyProgram(2, 4, 16);
  addMesh(*p, {{"dp", 2}, {"pp", 2}});
  p->stages.push_back(std::make_unique<fb::StageT>());
  const std::vector<std::vector<std::pair<std::string, int64_t>>> held = {
      {{"shared", 6}, {"a", 5}}, {{"b", 2}, {"shared", 6}}};
  for (uint32_t k = 0; k < 2; ++k) {
    fb::StageT &stage = *p->stages[k];
    stage.index = k;
    StageBuilder s(stage);
    for (const auto &[name, n] : held[k])
      s.param(name, {n});
    // An evaluation's pipeline stage: one chunk, one forward action.
    const uint32_t out = s.buffer("out", {});
    s.op(fb::Opcode::Fill, "fill", {}, {out}).value = 1.0;
    auto pipe = std::make_unique<fb::PipelineT>();
    pipe->schedule = "1f1b";
    pipe->stages = 2;
    auto chunk = std::make_unique<fb::PipelineChunkT>();
    chunk->index = k;
    chunk->forward.push_back(std::move(stage.instructions.back()));
    stage.instructions.clear();
    pipe->chunks.push_back(std::move(chunk));
    pipe->actions.emplace_back(0, 0, false);
    stage.pipeline = std::move(pipe);
  }
  program::LoadedProgram loaded;
  Status st = program::loadProgramBytes(serialize(*p), "pipeline", loaded);
  ASSERT_TRUE(st.ok()) << st.toString();
  const int r = comm->rank(), stage = r % 2;
  std::unique_ptr<Executor> ex;
  st =
      Executor::create(loaded, static_cast<uint32_t>(stage), 5, ex, comm.get());
  ASSERT_TRUE(st.ok()) << st.toString();
  ASSERT_TRUE(ex->isPipelined());

  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string path =
      "/tmp/loom_mpi_pipeline_" + std::to_string(pid) + ".safetensors";
  st = saveCheckpoint(*ex, path);
  ASSERT_TRUE(st.ok()) << st.toString();
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) {
    SafetensorsFile file;
    ASSERT_TRUE(readSafetensors(path, file).ok());
    EXPECT_EQ(file.tensors.size(), 3u);
    ParamInitializer init;
    init.kind = ParamInitializer::Kind::Normal;
    init.std = 0.2f;
    for (const auto &[name, n] : std::vector<std::pair<std::string, int64_t>>{
             {"shared", 6}, {"a", 5}, {"b", 2}}) {
      const SafeTensor *t = file.find(name);
      ASSERT_TRUE(t) << name;
      EXPECT_EQ(t->shape, (std::vector<int64_t>{n}));
      std::vector<float> expected(static_cast<size_t>(n)), got;
      ASSERT_TRUE(
          initParamSlice(expected.data(), name, 5, init, {n}, {0}, {n}).ok());
      ASSERT_TRUE(toFloat32(*t, got).ok());
      EXPECT_EQ(got, expected) << name;
    }
  }
  // Stage 1's copy of "shared" drifts: rank 0 refuses to write.
  MPI_Barrier(MPI_COMM_WORLD);
  if (stage == 1)
    for (const ParamView &v : ex->params())
      if (v.name == "shared")
        static_cast<float *>(ex->bufferData(v.buffer))[0] += 1.0f;
  st = saveCheckpoint(*ex, path + ".drift");
  if (r == 0) {
    ASSERT_FALSE(st.ok());
    EXPECT_NE(st.message().find("tensor 'shared' is held by several pipeline "
                                "stages and stage 1's copy differs from an "
                                "earlier stage's (max |difference| 1)"),
              std::string::npos)
        << st.message();
    // Refused, the save leaves nothing behind: no file, no temp file.
    const std::string drift = path + ".drift";
    EXPECT_NE(::access(drift.c_str(), F_OK), 0);
    EXPECT_NE(::access((drift + ".tmp." + std::to_string(::getpid())).c_str(),
                       F_OK),
              0);
  } else {
    EXPECT_TRUE(st.ok()) << st.toString();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (r == 0) {
    std::remove(path.c_str());
    std::remove((path + ".drift").c_str());
  }
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (worldRank() != 0) {
    // One report: rank 0 prints and writes --gtest_output.
    // The flag alone is not enough: InitGoogleTest already installed the
    // XML/JSON writer, and every rank writing one file interleaves them.
    ::testing::GTEST_FLAG(output) = "";
    auto &listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    delete listeners.Release(listeners.default_xml_generator());
  }
  const int rc = RUN_ALL_TESTS();
  int any = 0;
  MPI_Allreduce(&rc, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return any;
}
