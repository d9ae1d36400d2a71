//===- MpiBF16Test.cpp - bf16 collectives under mpirun -np 4 ----*- C++ -*-===//
//
// Mixed precision's collectives on the MPI communicator: bf16 sums (and
// averages, maxima) reduce in fp32 in group-rank order and round once, so
// every rank holds the same bits, including an element that a sum rounded
// to bf16 after every addition gets wrong; reduce-scatter likewise; the
// started (DDP-overlapped) all-reduce; gathers, all-to-all and send / recv
// move the 2-byte elements unchanged; an all-reduce among pipeline members;
// bytes counted at half of fp32's; a data-parallel bf16 training step whose
// ranks end with bit-identical weights; and ZeRO-1's sharded fp32 master:
// init by global index, AdamW on the shard, Cast, bf16 all-gather, and a
// checkpoint that holds the gathered masters.
//
//===----------------------------------------------------------------------===//
#include "MpiTestUtil.h"
#include "ProgramTestUtil.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/checkpoint.h"
#include "runtime/core/executor.h"
#include "runtime/core/param_init.h"
#include "runtime/core/safetensors.h"
#include "runtime/cpu/adamw.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

using namespace loom;
using namespace loom::test;

namespace {

/// Rank r's bf16 input: random values, except element 0 (1 on rank 0, 2^-9
/// on the others) and element 1 (2^-9 on every rank).
std::vector<uint16_t> bf16Input(int r, int64_t n) {
  std::mt19937 gen(static_cast<uint32_t>(100 + r));
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (auto &x : v)
    x = floatToBF16(dist(gen));
  // 1 + 4 * 2^-9 = 1 + 2^-7 is a bf16; rounding after each addition keeps 1
  // (2^-9 is below half of bf16's spacing at 1).
  v[0] = floatToBF16(r == 0 ? 1.0f : 0.001953125f);
  v[1] = floatToBF16(0.001953125f);
  return v;
}

/// The reduction of the ranks' inputs in rank order, in fp32, rounded once.
uint16_t reference(const std::vector<std::vector<uint16_t>> &in, size_t i,
                   fb::Reduction op) {
  float acc = bf16ToFloat(in[0][i]);
  for (size_t r = 1; r < in.size(); ++r) {
    const float v = bf16ToFloat(in[r][i]);
    acc = op == fb::Reduction::Max ? std::max(acc, v) : acc + v;
  }
  if (op == fb::Reduction::Avg)
    acc *= 1.0f / static_cast<float>(in.size());
  return floatToBF16(acc);
}

/// Every rank's `v` equal to rank 0's (bit for bit).
void expectSameOnEveryRank(Communicator &comm, const std::vector<uint16_t> &v) {
  std::vector<uint16_t> all(v.size() * 4);
  ASSERT_TRUE(comm.allGather(v.data(), all.data(),
                             static_cast<int64_t>(v.size()), fb::DType::BF16,
                             {0})
                  .ok());
  for (int r = 1; r < 4; ++r)
    EXPECT_TRUE(std::equal(v.begin(), v.end(), all.begin() + r * v.size()))
        << "rank " << r << " differs from rank 0";
}

TEST_F(Mpi, BF16AllReduceSumsInFp32AndRoundsOnce) {
  ASSERT_TRUE(comm->setMesh({{"dp", 4}}).ok());
  const int r = comm->rank();
  const int64_t n = 1001; // not divisible by the group: uneven blocks
  std::vector<std::vector<uint16_t>> in;
  for (int k = 0; k < 4; ++k)
    in.push_back(bf16Input(k, n));
  for (fb::Reduction op :
       {fb::Reduction::Sum, fb::Reduction::Avg, fb::Reduction::Max}) {
    std::vector<uint16_t> buf = in[r];
    comm->resetStats();
    Status s = comm->allReduce(buf.data(), n, fb::DType::BF16, op, {0});
    ASSERT_TRUE(s.ok()) << s.toString();
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(buf[i], reference(in, static_cast<size_t>(i), op))
          << "element " << i << ", reduction " << static_cast<int>(op);
    if (op == fb::Reduction::Sum) {
      EXPECT_EQ(bf16ToFloat(buf[0]), 1.0078125f); // 1 + 2^-7, not 1
      EXPECT_EQ(bf16ToFloat(buf[1]), 0.0078125f);
    }
    // Half of fp32's ring bytes.
    EXPECT_EQ(comm->stats().sentBytes[static_cast<int>(CommKind::AllReduce)],
              ringBytes(CommKind::AllReduce, 2 * n, 4));
    expectSameOnEveryRank(*comm, buf);
  }
  // Started (DDP's overlap), on a sub-group: dp x tp, over tp.
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"tp", 2}}).ok());
  std::vector<uint16_t> a = in[r], b = in[3 - r];
  Communicator::Ticket ta = -1, tb = -1;
  ASSERT_TRUE(comm->startAllReduce(a.data(), n, fb::DType::BF16,
                                   fb::Reduction::Sum, {1}, ta)
                  .ok());
  ASSERT_TRUE(comm->startAllReduce(b.data(), 7, fb::DType::BF16,
                                   fb::Reduction::Sum, {1}, tb)
                  .ok());
  comm->progress();
  ASSERT_TRUE(comm->complete(tb).ok());
  ASSERT_TRUE(comm->complete(ta).ok());
  const std::vector<int64_t> c = comm->coords();
  const int lo = comm->rankOf({c[0], 0}), hi = comm->rankOf({c[0], 1});
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(a[i], reference({in[lo], in[hi]}, static_cast<size_t>(i),
                              fb::Reduction::Sum))
        << i;
  for (int64_t i = 0; i < 7; ++i)
    ASSERT_EQ(b[i], reference({in[3 - lo], in[3 - hi]}, static_cast<size_t>(i),
                              fb::Reduction::Sum))
        << i;
}

TEST_F(Mpi, BF16ReduceScatterAndMovingCollectives) {
  ASSERT_TRUE(comm->setMesh({{"dp", 4}}).ok());
  const int r = comm->rank();
  const int64_t count = 33; // per block
  std::vector<std::vector<uint16_t>> in;
  for (int k = 0; k < 4; ++k)
    in.push_back(bf16Input(k, 4 * count));
  // Reduce-scatter: block r of everyone's input, reduced once.
  std::vector<uint16_t> out(count);
  comm->resetStats();
  ASSERT_TRUE(comm->reduceScatter(in[r].data(), out.data(), count,
                                  fb::DType::BF16, fb::Reduction::Sum, {0})
                  .ok());
  for (int64_t i = 0; i < count; ++i)
    ASSERT_EQ(out[i], reference(in, static_cast<size_t>(r * count + i),
                                fb::Reduction::Sum))
        << i;
  EXPECT_EQ(comm->stats().sentBytes[static_cast<int>(CommKind::ReduceScatter)],
            ringBytes(CommKind::ReduceScatter, 2 * 4 * count, 4));
  // Started (ZeRO-2/3 behind the next block): the same bits on completion,
  // the output untouched before it.
  std::vector<uint16_t> started(count, 0xffff);
  Communicator::Ticket t = -1;
  ASSERT_TRUE(comm->startReduceScatter(in[r].data(), started.data(), count,
                                       fb::DType::BF16, fb::Reduction::Sum,
                                       {0}, t)
                  .ok());
  EXPECT_GE(t, 0);
  EXPECT_EQ(started[0], 0xffff);
  comm->progress();
  ASSERT_TRUE(comm->complete(t).ok());
  EXPECT_EQ(started, out);
  // All-gather and all-to-all move the bits as they are.
  std::vector<uint16_t> gathered(4 * count);
  ASSERT_TRUE(comm->allGather(in[r].data(), gathered.data(), count,
                              fb::DType::BF16, {0})
                  .ok());
  for (int k = 0; k < 4; ++k)
    EXPECT_TRUE(std::equal(in[k].begin(), in[k].begin() + count,
                           gathered.begin() + k * count));
  std::vector<uint16_t> exchanged(4 * count);
  ASSERT_TRUE(comm->allToAll(in[r].data(), exchanged.data(), count,
                             fb::DType::BF16, {0})
                  .ok());
  for (int k = 0; k < 4; ++k)
    EXPECT_TRUE(std::equal(in[k].begin() + r * count,
                           in[k].begin() + (r + 1) * count,
                           exchanged.begin() + k * count));
  // Send / recv around the ring, with a NaN payload kept.
  std::vector<uint16_t> msg = in[r], got(4 * count);
  msg[5] = 0x7fc3;
  ASSERT_TRUE(
      comm->send(msg.data(), 4 * count, fb::DType::BF16, (r + 1) % 4, 9).ok());
  ASSERT_TRUE(
      comm->recv(got.data(), 4 * count, fb::DType::BF16, (r + 3) % 4, 9).ok());
  ASSERT_TRUE(comm->flush().ok());
  std::vector<uint16_t> want = in[(r + 3) % 4];
  want[5] = 0x7fc3;
  EXPECT_EQ(got, want);
  // A pipeline's shared parameter: members 0 and 1 of pp.
  ASSERT_TRUE(comm->setMesh({{"dp", 2}, {"pp", 2}}).ok());
  const std::vector<int64_t> c = comm->coords();
  std::vector<uint16_t> shared = in[r];
  ASSERT_TRUE(comm->allReduceAmong(shared.data(), 4 * count, fb::DType::BF16,
                                   fb::Reduction::Sum, 1, {0, 1})
                  .ok());
  const int first = comm->rankOf({c[0], 0}), last = comm->rankOf({c[0], 1});
  for (int64_t i = 0; i < 4 * count; ++i)
    ASSERT_EQ(shared[i], reference({in[first], in[last]},
                                   static_cast<size_t>(i), fb::Reduction::Sum))
        << i;
}

TEST_F(Mpi, BF16DataParallelTrainingKeepsRanksInStep) {
  // A bf16 data-parallel GPT on all 4 ranks: bf16 gradients averaged by the
  // communicator, fp32 masters updated and cast on each rank. Every rank
  // must end with the same bits in every parameter, master and moment.
  MiniGptDims local;
  local.B = 1;
  auto p = miniGptTrain(local);
  makeDataParallel(*p, 4);
  makeMixedPrecision(*p);
  program::LoadedProgram loaded;
  Status s = program::loadProgramBytes(serialize(*p), "dp-bf16", loaded);
  ASSERT_TRUE(s.ok()) << s.toString();
  std::unique_ptr<Executor> ex;
  s = Executor::create(loaded, 0, 42, ex, comm.get());
  ASSERT_TRUE(s.ok()) << s.toString();
  const int r = comm->rank();
  const int64_t T = ex->model().seq(), V = ex->model().vocab_size();
  std::vector<int32_t> in(static_cast<size_t>(T)), tgt(in.size());
  comm->resetStats();
  float first = 0, last = 0;
  for (int64_t step = 1; step <= 4; ++step) {
    for (int64_t t = 0; t < T; ++t) {
      in[t] = static_cast<int32_t>((7 * r + 3 * t + step) % V);
      tgt[t] = static_cast<int32_t>((7 * r + 3 * t + step + 1) % V);
    }
    TrainStepResult res;
    s = ex->trainStep(in.data(), tgt.data(), step, 1e-2f, res);
    ASSERT_TRUE(s.ok()) << s.toString();
    ASSERT_TRUE(std::isfinite(res.loss));
    (step == 1 ? first : last) = res.loss;
  }
  EXPECT_LT(last, first);
  for (const ParamView &pv : ex->params())
    for (int32_t b : {static_cast<int32_t>(pv.buffer), pv.masterBuffer,
                      pv.mBuffer, pv.vBuffer}) {
      ASSERT_GE(b, 0);
      const int64_t bytes =
          ex->bufferNumel(b) * fb::dtypeBytes(ex->bufferDType(b));
      const auto *p8 = static_cast<const uint8_t *>(ex->bufferData(b));
      std::vector<uint16_t> mine(static_cast<size_t>(bytes / 2));
      std::memcpy(mine.data(), p8, static_cast<size_t>(bytes));
      expectSameOnEveryRank(*comm, mine);
    }
  // The gradients travel as bf16: 16 parameters' gradients (2 bytes per
  // element) and the f32 loss per step.
  int64_t gradBytes = 0;
  for (const ParamView &pv : ex->params())
    gradBytes +=
        ringBytes(CommKind::AllReduce, 2 * ex->bufferNumel(pv.gradBuffer), 4);
  EXPECT_EQ(comm->stats().sentBytes[static_cast<int>(CommKind::AllReduce)],
            4 * (gradBytes + ringBytes(CommKind::AllReduce, 4, 4)));
}

TEST_F(Mpi, ZeroShardedMasterUpdateAndCheckpoint) {
  // ZeRO-1 on two jobs of 2 ranks (world {0, 1} and {2, 3}), mesh dp=2: the
  // bf16 parameter w [4, 3] and its bf16 gradient are replicated; its fp32
  // master and moments hold rows [2d, 2d + 2) (moment_sharding: dim 0 over
  // dp). The update slices the gradient, runs AdamW on the master shard,
  // casts it and all-gathers the bf16 shards into w.
  const int r = comm->rank();
  std::unique_ptr<Communicator> dp;
  ASSERT_NO_FATAL_FAILURE(joinHalfJob(dp));
  const int d = dp->rank();

  auto p = emptyProgram(2, 4, 16);
  auto axis = std::make_unique<fb::MeshAxisT>();
  axis->name = "dp";
  axis->size = 2;
  p->mesh.push_back(std::move(axis));
  StageBuilder s(*p->stages[0]);
  const auto BF = fb::DType::BF16;
  const uint32_t w = s.param("w", {4, 3});
  s.stage.buffers[w]->dtype = BF;
  auto &param = *s.stage.params.back();
  const uint32_t grad = s.buffer("grad.w", {4, 3}, BF);
  const uint32_t m = s.buffer("m.w", {2, 3}), v = s.buffer("v.w", {2, 3});
  const uint32_t master = s.buffer("master.w", {2, 3});
  param.grad_buffer = static_cast<int32_t>(grad);
  param.m_buffer = static_cast<int32_t>(m);
  param.v_buffer = static_cast<int32_t>(v);
  param.master_buffer = static_cast<int32_t>(master);
  for (std::vector<uint32_t> axes : {std::vector<uint32_t>{0}, {}}) {
    auto ds = std::make_unique<fb::DimShardingT>();
    ds->axes = axes;
    param.moment_sharding.push_back(std::move(ds));
  }
  const uint32_t lr = s.buffer("lr", {}), step = s.buffer("step", {}),
                 coef = s.buffer("coef", {});
  const uint32_t gshard = s.buffer("grad.w.shard", {2, 3}, BF),
                 wshard = s.buffer("w.shard", {2, 3}, BF);
  s.stage.lr = static_cast<int32_t>(lr);
  s.stage.step = static_cast<int32_t>(step);
  s.updateOp(fb::Opcode::Fill, "coef", {}, {coef}).value = 1.0;
  auto &slice =
      s.updateOp(fb::Opcode::LocalSlice, "grad.slice", {grad}, {gshard});
  slice.axes = {0};
  slice.dim = 0;
  auto &adamw =
      s.updateOp(fb::Opcode::AdamW, "adamw.w",
                 {master, gshard, m, v, lr, step, coef}, {master, m, v});
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.95;
  adamw.adam_eps = 1e-8;
  adamw.weight_decay = 0.1;
  s.updateOp(fb::Opcode::Cast, "cast.w", {master}, {wshard});
  auto &gather = s.updateOp(fb::Opcode::AllGather, "gather.w", {wshard}, {w});
  gather.axes = {0};
  gather.dim = 0;
  program::LoadedProgram loaded;
  Status st = program::loadProgramBytes(serialize(*p), "zero1-bf16", loaded);
  ASSERT_TRUE(st.ok()) << st.toString();
  std::unique_ptr<Executor> ex;
  st = Executor::create(loaded, 0, 5, ex, dp.get());
  ASSERT_TRUE(st.ok()) << st.toString();

  // 1. Init: the master shard holds the fp32 values of its global rows, w
  //    the whole tensor rounded.
  std::vector<float> global(12);
  ParamInitializer init;
  init.kind = ParamInitializer::Kind::Normal;
  init.std = 0.2f;
  ASSERT_TRUE(
      initParamSlice(global.data(), "w", 5, init, {4, 3}, {0, 0}, {4, 3}).ok());
  auto masterNow = [&] {
    const float *f = static_cast<const float *>(ex->bufferData(master));
    return std::vector<float>(f, f + 6);
  };
  auto weightsNow = [&] {
    const uint16_t *h = static_cast<const uint16_t *>(ex->bufferData(w));
    return std::vector<uint16_t>(h, h + 12);
  };
  auto roundedAll = [](const std::vector<float> &x) {
    std::vector<uint16_t> out(x.size());
    floatsToBF16(out.data(), x.data(), static_cast<int64_t>(x.size()));
    return out;
  };
  EXPECT_EQ(masterNow(), std::vector<float>(global.begin() + 6 * d,
                                            global.begin() + 6 * d + 6));
  EXPECT_EQ(weightsNow(), roundedAll(global));
  // 2 (w) + 2 (grad) + 4 (master) + 4 + 4 (moments) bytes, ZeRO-1's
  // 2 + 2 + 12 / N per element (N = 2) plus the update's shards.
  EXPECT_EQ(ex->modelStateBytes(), 12 * 2 + 12 * 2 + 6 * 4 * 3);

  // 2. One update with the same bf16 gradient on both ranks.
  std::vector<uint16_t> g(12);
  for (int i = 0; i < 12; ++i)
    g[i] = floatToBF16(0.05f * static_cast<float>(i - 5));
  std::memcpy(ex->bufferData(grad), g.data(), 24);
  dp->resetStats();
  st = ex->runUpdate(1, 1e-2f);
  ASSERT_TRUE(st.ok()) << st.toString();
  std::vector<float> want = global, gw(12), mw(12, 0.0f), vw(12, 0.0f);
  bf16ToFloats(gw.data(), g.data(), 12);
  cpu::AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.step = 1;
  cfg.beta1 = 0.9;
  cfg.beta2 = 0.95;
  cfg.eps = 1e-8;
  cfg.weightDecay = 0.1;
  cpu::adamwStep(want.data(), gw.data(), mw.data(), vw.data(), 12, cfg);
  EXPECT_EQ(masterNow(),
            std::vector<float>(want.begin() + 6 * d, want.begin() + 6 * d + 6));
  EXPECT_EQ(weightsNow(), roundedAll(want));
  // The parameter's all-gather moves bf16: half of fp32's bytes.
  EXPECT_EQ(dp->stats().sentBytes[static_cast<int>(CommKind::AllGather)],
            ringBytes(CommKind::AllGather, 12 * 2, 2));

  // 3. The checkpoint holds the gathered fp32 masters; loading restores the
  //    shards and rounds the whole tensor into w.
  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  const std::string path = "/tmp/loom_mpi_zero_bf16_" + std::to_string(pid) +
                           "_" + std::to_string(r / 2) + ".safetensors";
  st = saveCheckpoint(*ex, path, 1);
  ASSERT_TRUE(st.ok()) << st.toString();
  MPI_Barrier(MPI_COMM_WORLD);
  SafetensorsFile file;
  ASSERT_TRUE(readSafetensors(path, file).ok());
  std::vector<float> saved;
  ASSERT_TRUE(toFloat32(*file.find("w"), saved).ok());
  EXPECT_EQ(saved, want);
  std::memset(ex->bufferData(master), 0, 24);
  std::memset(ex->bufferData(w), 0, 24);
  int64_t steps = 0;
  st = loadCheckpoint(*ex, path, &steps);
  ASSERT_TRUE(st.ok()) << st.toString();
  EXPECT_EQ(steps, 1);
  EXPECT_EQ(masterNow(),
            std::vector<float>(want.begin() + 6 * d, want.begin() + 6 * d + 6));
  EXPECT_EQ(weightsNow(), roundedAll(want));
  MPI_Barrier(MPI_COMM_WORLD);
  if (d == 0)
    std::remove(path.c_str());
}

} // namespace
