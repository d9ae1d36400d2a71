//===- executor.cpp - Runs one stage of a verified program -----*- C++ -*-===//
//
// The arena comes from an anonymous mmap: page aligned (more than the 64 bytes
// the planner assumes), zeroed, and only touched pages cost memory. Each
// instruction maps to one CPU kernel call; when an output shares bytes with an
// input and the kernel cannot run in place, the result is computed into a
// staging temporary and copied (the memory this costs is reported by
// peakTensorBytes).
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include "runtime/core/param_init.h"
#include "runtime/cpu/attention.h"
#include "runtime/cpu/cross_entropy.h"
#include "runtime/cpu/elementwise.h"
#include "runtime/cpu/embedding.h"
#include "runtime/cpu/gelu.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/layernorm.h"
#include "runtime/cpu/softmax.h"
#include "runtime/cpu/tensor_movement.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <stdexcept>
#include <sys/mman.h>

namespace loom {

using program::DType;
using program::Opcode;

int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

Status Executor::create(const program::LoadedProgram &program,
                        uint32_t stageIndex, uint64_t seed,
                        std::unique_ptr<Executor> &out) {
  out.reset();
  LOOM_CHECK(program.root(), "no program loaded");
  const program::Stage *stage = program.stage(stageIndex);
  if (!stage) {
    std::string have;
    for (const program::Stage *s : *program.root()->stages())
      have += (have.empty() ? "" : ", ") + std::to_string(s->index());
    LOOM_ERROR("program '" << program.source() << "' has no stage "
                           << stageIndex << " (stages: " << have << ")");
  }
  std::unique_ptr<Executor> ex(new Executor());
  ex->stageTable = stage;
  ex->modelInfo = program.root()->model();

  // 1. Arena.
  ex->arenaSize = stage->arena_bytes();
  if (ex->arenaSize > 0) {
    void *p = ::mmap(nullptr, ex->arenaSize, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    LOOM_CHECK(p != MAP_FAILED,
               "cannot allocate the arena of stage "
                   << stageIndex << ": " << ex->arenaSize
                   << " bytes; the program needs more memory than this "
                      "machine offers");
    ex->arena = static_cast<uint8_t *>(p);
  }

  // 2. Buffer shapes.
  const uint32_t nb = stage->buffers() ? stage->buffers()->size() : 0;
  for (uint32_t b = 0; b < nb; ++b)
    ex->shapes.push_back(program::bufferShape(*stage, b));

  // 3. Parameters.
  if (const auto *params = stage->params()) {
    for (const program::Param *p : *params) {
      ParamView v;
      v.name = p->name()->str();
      if (p->global_shape())
        v.globalShape.assign(p->global_shape()->begin(),
                             p->global_shape()->end());
      if (p->slice_offset())
        v.sliceOffset.assign(p->slice_offset()->begin(),
                             p->slice_offset()->end());
      v.buffer = p->buffer();
      v.localShape = ex->shapes[v.buffer];
      ParamInitializer init;
      switch (p->init()) {
      case program::InitKind::Zeros:
        init.kind = ParamInitializer::Kind::Zeros;
        break;
      case program::InitKind::Ones:
        init.kind = ParamInitializer::Kind::Ones;
        break;
      default:
        init.kind = ParamInitializer::Kind::Normal;
        init.std = static_cast<float>(p->init_std());
        break;
      }
      LOOM_RETURN_IF_ERROR(initParamSlice(
          static_cast<float *>(ex->bufferData(v.buffer)), v.name, seed, init,
          v.globalShape, v.sliceOffset, v.localShape));
      ex->paramViews.push_back(std::move(v));
    }
  }
  out = std::move(ex);
  return Status::success();
}

Executor::~Executor() {
  if (arena)
    ::munmap(arena, arenaSize);
}

void *Executor::bufferData(uint32_t index) {
  return arena + stageTable->buffers()->Get(index)->offset();
}

const void *Executor::bufferData(uint32_t index) const {
  return arena + stageTable->buffers()->Get(index)->offset();
}

int64_t Executor::bufferNumel(uint32_t index) const {
  return program::shapeNumel(shapes[index]);
}

DType Executor::bufferDType(uint32_t index) const {
  return stageTable->buffers()->Get(index)->dtype();
}

Status Executor::readLoss(float &loss) const {
  const int32_t b = stageTable->loss();
  LOOM_CHECK(b >= 0, "stage " << stageTable->index()
                              << " has no loss buffer (only the last "
                                 "pipeline stage computes the loss)");
  std::memcpy(&loss, bufferData(static_cast<uint32_t>(b)), sizeof(float));
  return Status::success();
}

uint64_t Executor::peakTensorBytes() const {
  return arenaSize +
         (staging.capacity() + workspace.capacity() + workspace2.capacity()) *
             sizeof(float);
}

float *Executor::temp(std::vector<float> &pool, int64_t count) {
  if (static_cast<int64_t>(pool.size()) < count)
    pool.resize(static_cast<size_t>(count));
  return pool.data();
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

Status Executor::run(std::vector<InstructionTiming> *timings) {
  const auto *instructions = stageTable->instructions();
  if (!instructions)
    return Status::success();
  for (uint32_t i = 0; i < instructions->size(); ++i) {
    const int64_t start = timings ? steadyNowNs() : 0;
    Status s;
    try {
      s = runInstruction(i);
    } catch (const std::bad_alloc &) {
      s = Status::error("out of memory allocating a temporary");
    } catch (const std::exception &e) {
      s = Status::error(std::string("cannot allocate a temporary: ") +
                        e.what());
    }
    if (!s.ok()) {
      const program::Instruction *ins = instructions->Get(i);
      return s.withContext("stage " + std::to_string(stageTable->index()) +
                           ", instruction #" + std::to_string(i) + " '" +
                           (ins->name() ? ins->name()->str() : std::string()) +
                           "' (" + program::opcodeName(ins->opcode()) + ")");
    }
    if (timings)
      timings->push_back({i, start, steadyNowNs()});
  }
  return Status::success();
}

namespace {

/// Byte range of a buffer in the arena.
struct Range {
  uint64_t begin, end;
  bool overlaps(const Range &o) const { return begin < o.end && o.begin < end; }
  bool operator==(const Range &o) const {
    return begin == o.begin && end == o.end;
  }
};

} // namespace

Status Executor::runInstruction(uint32_t i) {
  const program::Instruction &ins = *stageTable->instructions()->Get(i);
  std::vector<uint32_t> in, out, scr;
  if (ins.inputs())
    in.assign(ins.inputs()->begin(), ins.inputs()->end());
  if (ins.outputs())
    out.assign(ins.outputs()->begin(), ins.outputs()->end());
  if (ins.scratch())
    scr.assign(ins.scratch()->begin(), ins.scratch()->end());
  auto range = [&](uint32_t b) {
    const uint64_t off = stageTable->buffers()->Get(b)->offset();
    return Range{
        off, off + static_cast<uint64_t>(bufferNumel(b) *
                                         program::dtypeBytes(bufferDType(b)))};
  };
  auto f32 = [&](uint32_t b) { return static_cast<float *>(bufferData(b)); };
  auto i32 = [&](uint32_t b) { return static_cast<int32_t *>(bufferData(b)); };

  const Opcode op = ins.opcode();
  const uint32_t o = out[0];
  const Range outRange = range(o);
  // Kernels that may write their output over an identical input buffer.
  const bool elementwise = op == Opcode::Gelu || op == Opcode::Softmax ||
                           op == Opcode::Add || op == Opcode::Copy;
  bool staged = false;
  for (size_t k = 0; k < in.size(); ++k) {
    const Range r = range(in[k]);
    if (!r.overlaps(outRange))
      continue;
    // Add may alias its lhs, not its (broadcast) rhs.
    const bool exact = r == outRange && (op != Opcode::Add || k == 0);
    if (!(elementwise && exact))
      staged = true;
  }
  if (op == Opcode::Copy)
    staged = false; // memmove handles any overlap
  const int64_t outBytes = static_cast<int64_t>(outRange.end - outRange.begin);
  void *dst = staged ? static_cast<void *>(temp(staging, (outBytes + 3) / 4))
                     : bufferData(o);
  float *dstF = static_cast<float *>(dst);

  switch (op) {
  case Opcode::Embedding: {
    const auto &t = shapes[in[0]];
    LOOM_RETURN_IF_ERROR(cpu::embeddingForward(dstF, i32(in[1]), f32(in[0]),
                                               bufferNumel(in[1]), t[0], t[1]));
    break;
  }
  case Opcode::Add: {
    const int64_t inner = bufferNumel(in[1]);
    const int64_t outer = bufferNumel(in[0]) / inner;
    if (outer == 1)
      cpu::add(dstF, f32(in[0]), f32(in[1]), inner);
    else
      cpu::addBroadcast(dstF, f32(in[0]), f32(in[1]), outer, inner);
    break;
  }
  case Opcode::Linear: {
    const auto &w = shapes[in[1]];
    const int64_t M = bufferNumel(in[0]) / w[0];
    cpu::linearForward(dstF, f32(in[0]), f32(in[1]),
                       in.size() == 3 ? f32(in[2]) : nullptr, M, w[0], w[1]);
    break;
  }
  case Opcode::Matmul: {
    const auto &r = shapes[in[1]];
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = bufferNumel(in[0]) / K;
    cpu::gemm(false, t, M, N, K, 1.0f, f32(in[0]), K, f32(in[1]), r[1], 0.0f,
              dstF, N);
    break;
  }
  case Opcode::LayerNorm: {
    const int64_t C = shapes[in[0]].back();
    const int64_t N = bufferNumel(in[0]) / C;
    float *mean = scr.empty() ? temp(workspace, N) : f32(scr[0]);
    float *rstd = scr.empty() ? temp(workspace2, N) : f32(scr[1]);
    cpu::layernormForward(dstF, mean, rstd, f32(in[0]), f32(in[1]), f32(in[2]),
                          N, C, static_cast<float>(ins.epsilon()));
    break;
  }
  case Opcode::Gelu:
    cpu::geluForward(dstF, f32(in[0]), bufferNumel(in[0]));
    break;
  case Opcode::Softmax: {
    const int64_t C = shapes[in[0]].back();
    cpu::softmaxForward(dstF, f32(in[0]), bufferNumel(in[0]) / C, C);
    break;
  }
  case Opcode::Attention: {
    const auto &q = shapes[in[0]];
    const int64_t B = q[0], T = q[1], C = q[2] / 3, NH = ins.num_heads();
    float *att = scr.empty() ? temp(workspace, B * NH * T * T) : f32(scr[0]);
    cpu::attentionForward(dstF, att, f32(in[0]), B, T, C, NH);
    break;
  }
  case Opcode::CrossEntropy: {
    const int64_t V = shapes[in[0]].back();
    const int64_t N = bufferNumel(in[0]) / V;
    // Columns beyond the model's vocabulary are padding (Megatron style).
    const int64_t validV = std::min<int64_t>(V, modelInfo->vocab_size());
    float *losses = scr.empty() ? nullptr : f32(scr[0]);
    LOOM_RETURN_IF_ERROR(cpu::crossEntropyForward(dstF, losses, f32(in[0]),
                                                  i32(in[1]), N, V, validV));
    break;
  }
  case Opcode::Copy:
    std::memmove(dst, bufferData(in[0]), static_cast<size_t>(outBytes));
    break;
  case Opcode::Transpose: {
    std::vector<int64_t> perm; // absent for a scalar
    if (ins.permutation())
      perm.assign(ins.permutation()->begin(), ins.permutation()->end());
    cpu::transpose(dst, bufferData(in[0]), shapes[in[0]], perm,
                   program::dtypeBytes(bufferDType(o)));
    break;
  }
  case Opcode::Slice:
    cpu::sliceDim(dst, bufferData(in[0]), shapes[in[0]], ins.dim(),
                  ins.offset(), shapes[o][ins.dim()],
                  program::dtypeBytes(bufferDType(o)));
    break;
  case Opcode::Concat: {
    std::vector<const void *> srcs;
    std::vector<int64_t> extents;
    for (uint32_t b : in) {
      srcs.push_back(bufferData(b));
      extents.push_back(shapes[b][ins.dim()]);
    }
    cpu::concatDim(dst, srcs, extents, shapes[o], ins.dim(),
                   program::dtypeBytes(bufferDType(o)));
    break;
  }
  default:
    LOOM_ERROR("opcode " << program::opcodeName(op)
                         << " cannot run on this runtime");
  }
  if (staged)
    std::memcpy(bufferData(o), dst, static_cast<size_t>(outBytes));
  return Status::success();
}

} // namespace loom
