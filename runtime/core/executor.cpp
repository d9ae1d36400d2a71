//===- executor.cpp - Executor setup, buffers and temporaries ---*- C++ -*-===//
//
// The arena comes from a BufferMemory (buffer_memory.h; cpu::HostMemory: an
// anonymous mmap, page aligned, zeroed, only touched pages cost memory), and
// every byte the host writes into it or reads from it (parameter init, the
// micro-batch's tokens / targets, the loss, the gradient norm, gradient
// zeroing, lr / step, pipeline stashes) goes through its copies. This file
// creates the executor (arena, buffer shapes, parameters initialized, the
// bf16 staging plans and memory) and holds its buffer accessors, loss slots
// and temporaries. The rest of Executor: the step drivers
// (executor_step.cpp), the pipelined ones (executor_pipeline.cpp), one
// instruction (executor_instruction.cpp) and the collectives
// (executor_collectives.cpp).
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include "runtime/core/bf16_staging.h"
#include "runtime/core/bfloat16.h"
#include "runtime/core/cross_entropy_fusion.h"
#include "runtime/core/gelu_epilogues.h"
#include "runtime/core/param_init.h"
#include "runtime/core/residual_norms.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/gemm.h"
#include "runtime/cpu/host_memory.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <stdexcept>
#include <utility>

namespace loom {

using program::DType;
using InstructionList =
    flatbuffers::Vector<flatbuffers::Offset<program::Instruction>>;

int64_t steadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

//===----------------------------------------------------------------------===//
// Setup
//===----------------------------------------------------------------------===//

namespace {

/// Initializes the box `offset` + `shape` of parameter `v`'s global tensor
/// on the host (fp32 values by global index: param_init.h) and copies it
/// into `dst`, a buffer of `dtype`: BF16 gets the values rounded to nearest
/// even, as the Cast of the same fp32 values would give.
Status initParamBuffer(BufferMemory &memory, void *dst, DType dtype,
                       const ParamView &v, uint64_t seed,
                       const ParamInitializer &init,
                       const std::vector<int64_t> &offset,
                       const std::vector<int64_t> &shape) {
  std::vector<float> values(static_cast<size_t>(program::shapeNumel(shape)));
  LOOM_RETURN_IF_ERROR(initParamSlice(values.data(), v.name, seed, init,
                                      v.globalShape, offset, shape));
  // Padding rows start (and, with a zero gradient, stay) at zero; the real
  // rows keep the values of their global index, as unpadded.
  if (v.unpaddedRows > 0) {
    const int64_t rowSize = program::shapeNumel(shape) / shape[0];
    const int64_t firstPadding =
        std::clamp<int64_t>(v.unpaddedRows - offset[0], 0, shape[0]);
    std::fill(values.begin() + firstPadding * rowSize,
              values.begin() + shape[0] * rowSize, 0.0f);
  }
  if (dtype != DType::BF16)
    return memory.copyIn(dst, values.data(), values.size() * sizeof(float));
  std::vector<uint16_t> rounded(values.size());
  floatsToBF16(rounded.data(), values.data(),
               static_cast<int64_t>(values.size()));
  return memory.copyIn(dst, rounded.data(), rounded.size() * sizeof(uint16_t));
}

} // namespace

Status Executor::create(const program::LoadedProgram &program,
                        uint32_t stageIndex, uint64_t seed,
                        std::unique_ptr<Executor> &out, Communicator *comm,
                        std::unique_ptr<KernelBackend> kernels,
                        std::unique_ptr<BufferMemory> memory,
                        ParamStart start) {
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
  if (!comm) {
    ex->ownComm = std::make_unique<SingleRankCommunicator>();
    comm = ex->ownComm.get();
  }
  ex->comm = comm;
  if (!kernels)
    LOOM_RETURN_IF_ERROR(cpu::checkCpuGemmSetting());
  ex->kernels = kernels ? std::move(kernels)
                        : std::make_unique<cpu::CpuKernels>();
  LOOM_RETURN_IF_ERROR(comm->setMesh(programMesh(*program.root())));
  ex->stageTable = stage;
  ex->modelInfo = program.root()->model();

  // 1. Arena.
  ex->arenaSize = stage->arena_bytes();
  ex->memory = memory ? std::move(memory) : std::make_unique<cpu::HostMemory>();
  // The collectives' buffer pointers are this arena's (a single rank copies
  // through it, MPI stages a device arena through the host).
  comm->bindBufferMemory(ex->memory.get());
  Status allocated = ex->memory->allocate(ex->arenaSize, ex->arena);
  if (!allocated.ok())
    return allocated.withContext("the arena of stage " +
                                 std::to_string(stageIndex));

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
      v.checkpointShape = v.globalShape;
      if (p->checkpoint_shape() && p->checkpoint_shape()->size() > 0)
        v.checkpointShape.assign(p->checkpoint_shape()->begin(),
                                 p->checkpoint_shape()->end());
      v.unpaddedRows = p->unpadded_rows();
      if (v.unpaddedRows > 0)
        v.checkpointShape[0] = v.unpaddedRows; // checked by the verifier
      v.buffer = p->buffer();
      v.gradBuffer = p->grad_buffer();
      v.mBuffer = p->m_buffer();
      v.vBuffer = p->v_buffer();
      v.masterBuffer = p->master_buffer();
      v.localShape = ex->shapes[v.buffer];
      if (p->sharding() && p->sharding()->size() > 0) {
        // Offset along d = block index on sharding[d].axes x local size.
        v.sliceOffset.assign(v.localShape.size(), 0);
        for (uint32_t d = 0; d < p->sharding()->size(); ++d) {
          std::vector<uint32_t> axes;
          if (const auto *a = p->sharding()->Get(d)->axes())
            axes.assign(a->begin(), a->end());
          v.sliceOffset[d] = comm->blockIndex(axes) * v.localShape[d];
          v.sharding.push_back(std::move(axes));
        }
      }
      auto readSharding =
          [](const flatbuffers::Vector<
              flatbuffers::Offset<program::DimSharding>> *sh) {
            std::vector<std::vector<uint32_t>> out;
            if (sh)
              for (const program::DimSharding *ds : *sh) {
                std::vector<uint32_t> axes;
                if (ds && ds->axes())
                  axes.assign(ds->axes()->begin(), ds->axes()->end());
                out.push_back(std::move(axes));
              }
            return out;
          };
      v.gradSharding = readSharding(p->grad_sharding());
      v.momentSharding = readSharding(p->moment_sharding());
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
      if (start == ParamStart::Seeded)
        LOOM_RETURN_IF_ERROR(initParamBuffer(
            *ex->memory, ex->bufferData(v.buffer), ex->bufferDType(v.buffer), v,
            seed, init, v.sliceOffset, v.localShape));
      if (start == ParamStart::Seeded && v.masterBuffer >= 0) {
        // The fp32 master of a bf16 parameter: the same values at the same
        // global indices, over the master's own block (sharded like the
        // AdamW moments under ZeRO, else the parameter's slice).
        const uint32_t master = static_cast<uint32_t>(v.masterBuffer);
        const std::vector<int64_t> &shape = ex->shapes[master];
        std::vector<int64_t> offset = v.sliceOffset;
        bool momentSharded = false;
        for (const auto &axes : v.momentSharding)
          momentSharded = momentSharded || !axes.empty();
        if (!v.momentSharding.empty()) {
          offset.assign(shape.size(), 0);
          for (size_t d = 0; momentSharded && d < shape.size(); ++d)
            offset[d] = comm->blockIndex(v.momentSharding[d]) * shape[d];
        }
        LOOM_RETURN_IF_ERROR(initParamBuffer(*ex->memory,
                                             ex->bufferData(master), DType::F32,
                                             v, seed, init, offset, shape));
      }
      ex->paramViews.push_back(std::move(v));
    }
  }
  // 4. Staging for the fp32 kernels of instructions with BF16 operands:
  //    once, as large as the largest of them needs.
  //    The plans are kept: runInstruction looks them up instead of
  //    re-deriving them from the buffer table on every execution.
  uint64_t stagingBytes = 0;
  auto plan = [&](const InstructionList *list) {
    if (!list)
      return;
    for (const program::Instruction *ins : *list) {
      BF16StagingPlan p = planBF16Staging(*stage, *ins);
      if (p.empty())
        continue;
      if (!ex->kernels->handlesBF16Natively(ins->opcode()))
        stagingBytes = std::max(stagingBytes, p.bytes);
      ex->bf16Plans.emplace(ins, std::move(p));
    }
  };
  plan(stage->instructions());
  plan(stage->update_instructions());
  if (stage->pipeline())
    for (const program::PipelineChunk *chunk : *stage->pipeline()->chunks()) {
      plan(chunk->forward());
      plan(chunk->backward());
    }
  Status staged = ex->memory->allocate(stagingBytes, ex->bf16Staging);
  if (!staged.ok())
    return staged.withContext("the bf16 staging memory of stage " +
                              std::to_string(stageIndex));
  ex->bf16StagingSize = stagingBytes;
  // 5. AdamW groups of the update (a backend that runs them as one call).
  if (ex->kernels->groupsAdamW() && stage->update_instructions())
    for (AdamWGroupPlan &g :
         planAdamWGroups(*stage, *stage->update_instructions())) {
      const program::Instruction *first =
          stage->update_instructions()->Get(g.first);
      ex->adamwGroups.emplace(first, std::move(g));
    }
  // 6. Spans of the micro-batch list the backend runs as one call: a GEMM
  //    and its GELU, a residual Add and a layer norm, a loss and its
  //    gradient.
  if (ex->kernels->fusesGeluEpilogues())
    for (const GeluEpiloguePlan &p : planGeluEpilogues(*stage))
      ex->fusedSpans.emplace(stage->instructions()->Get(p.first),
                             FusedSpan{p.backward ? FusedKind::LinearGradGelu
                                                  : FusedKind::LinearGelu,
                                       2, p.firstResultUnread});
  if (ex->kernels->fusesResidualNorms())
    for (const ResidualNormPlan &p : planResidualNorms(*stage))
      ex->fusedSpans.emplace(stage->instructions()->Get(p.first),
                             FusedSpan{p.backward ? FusedKind::LayerNormGradAdd
                                                  : FusedKind::AddLayerNorm});
  if (ex->kernels->fusesCrossEntropyGrad())
    for (const CrossEntropyFusionPlan &p : planCrossEntropyFusion(*stage))
      ex->fusedSpans.emplace(
          stage->instructions()->Get(p.first),
          FusedSpan{FusedKind::CrossEntropyWithGrad, p.count});
  out = std::move(ex);
  return Status::success();
}

Executor::~Executor() {
  if (!memory)
    return;
  if (comm && comm->bufferMemory() == memory.get())
    comm->bindBufferMemory(nullptr);
  memory->release(arena, arenaSize);
  memory->release(bf16Staging, bf16StagingSize);
  for (const auto &[bytes, base] : spares)
    memory->release(base, bytes);
  for (TempPool *pool : {&workspace, &workspace2})
    memory->release(pool->data, pool->capacity * sizeof(float));
  for (TempPool &pool : staging)
    memory->release(pool.data, pool.capacity * sizeof(float));
  memory->release(lossSlots, static_cast<uint64_t>(lossSlotCount) * 4);
}

void *Executor::bufferData(uint32_t index) {
  return const_cast<void *>(std::as_const(*this).bufferData(index));
}

const void *Executor::bufferData(uint32_t index) const {
  const program::Buffer *b = stageTable->buffers()->Get(index);
  if (!b->stash())
    return arena + b->offset();
  return stashSlot ? stashSlot + b->offset() : nullptr;
}

int64_t Executor::bufferNumel(uint32_t index) const {
  return program::shapeNumel(shapes[index]);
}

int64_t Executor::localBatch() const {
  return modelInfo->batch() / comm->axisSize("dp");
}

DType Executor::bufferDType(uint32_t index) const {
  return stageTable->buffers()->Get(index)->dtype();
}

int64_t Executor::modelStateBytes() const {
  std::set<int32_t> held;
  for (const ParamView &p : paramViews)
    for (int32_t b : {static_cast<int32_t>(p.buffer), p.gradBuffer, p.mBuffer,
                      p.vBuffer, p.masterBuffer})
      if (b >= 0)
        held.insert(b);
  int64_t bytes = 0;
  for (int32_t b : held)
    bytes += bufferNumel(static_cast<uint32_t>(b)) *
             program::dtypeBytes(bufferDType(static_cast<uint32_t>(b)));
  return bytes;
}

Status Executor::lossSlot(int64_t i, int64_t count, float *&slot) {
  if (count > lossSlotCount) {
    // Grown between steps only (count is the step's micro-batch count).
    memory->release(lossSlots, static_cast<uint64_t>(lossSlotCount) * 4);
    lossSlots = nullptr;
    lossSlotCount = 0;
    LOOM_RETURN_IF_ERROR(
        memory->allocate(static_cast<uint64_t>(count) * 4, lossSlots));
    lossSlotCount = count;
  }
  slot = reinterpret_cast<float *>(lossSlots) + i;
  return Status::success();
}

Status Executor::sumLossSlots(int64_t count, double &sum) {
  std::vector<float> losses(static_cast<size_t>(count));
  if (count > 0)
    LOOM_RETURN_IF_ERROR(memory->copyOut(losses.data(), lossSlots,
                                         static_cast<uint64_t>(count) * 4));
  sum = 0;
  for (float l : losses)
    sum += l;
  return Status::success();
}

Status Executor::readLoss(float &loss) const {
  const int32_t b = stageTable->loss();
  LOOM_CHECK(b >= 0, "stage " << stageTable->index()
                              << " has no loss buffer (only the last "
                                 "pipeline stage computes the loss)");
  return memory->copyOut(&loss, bufferData(static_cast<uint32_t>(b)),
                         sizeof(float));
}

uint64_t Executor::peakTensorBytes() const {
  uint64_t floats = workspace.capacity + workspace2.capacity;
  for (const TempPool &pool : staging)
    floats += pool.capacity;
  return arenaSize + bf16StagingSize + floats * sizeof(float) + spareBytes;
}

Status Executor::takeSpare(uint64_t bytes, uint8_t *&base, bool countInPeak) {
  if (auto it = spares.find(bytes); it != spares.end()) {
    base = it->second;
    spares.erase(it);
    return Status::success();
  }
  LOOM_RETURN_IF_ERROR(memory->allocate(bytes, base));
  if (countInPeak)
    spareBytes += bytes;
  return Status::success();
}

void Executor::returnSpare(uint64_t bytes, uint8_t *base) {
  if (base)
    spares.emplace(bytes, base);
}

Status Executor::copyTokensIn(int32_t buffer, const int32_t *ids, int64_t count,
                              const char *what, int64_t firstRow) {
  if (buffer < 0)
    return Status::success();
  // A kernel on the device cannot report a bad id (the CPU kernels do, the
  // CUDA ones would read outside the table): check them on the host first.
  const int64_t V = modelInfo->vocab_size(), T = modelInfo->seq();
  for (int64_t i = 0; i < count; ++i)
    LOOM_CHECK(ids[i] >= 0 && ids[i] < V,
               what << " id " << ids[i] << " at row " << firstRow + i / T
                    << ", position " << i % T
                    << " of this rank's batch is outside the vocabulary [0, "
                    << V
                    << "); check the token file and the model's "
                       "vocab_size");
  return memory->copyIn(bufferData(static_cast<uint32_t>(buffer)), ids,
                        static_cast<uint64_t>(count) * sizeof(int32_t));
}

Status Executor::copyMicrobatchIn(const int32_t *inputs,
                                  const int32_t *targets, int64_t firstRow,
                                  int64_t rows) {
  const int64_t T = modelInfo->seq(), offset = firstRow * T;
  LOOM_RETURN_IF_ERROR(copyTokensIn(stageTable->tokens(), inputs + offset,
                                    rows * T, "token", firstRow));
  return copyTokensIn(stageTable->targets(), targets + offset, rows * T,
                      "target", firstRow);
}

Status Executor::copyToBuffer(uint32_t index, const void *host,
                              uint64_t bytes) {
  LOOM_CHECK(bytes <= bufferBytes(index),
             "copy of " << bytes << " bytes into buffer #" << index << " of "
                        << bufferBytes(index) << " bytes");
  return memory->copyIn(bufferData(index), host, bytes);
}

Status Executor::copyFromBuffer(uint32_t index, void *host,
                                uint64_t bytes) const {
  LOOM_CHECK(bytes <= bufferBytes(index),
             "copy of " << bytes << " bytes out of buffer #" << index << " of "
                        << bufferBytes(index) << " bytes");
  return memory->copyOut(host, bufferData(index), bytes);
}

uint64_t Executor::bufferBytes(uint32_t index) const {
  return static_cast<uint64_t>(bufferNumel(index) *
                               program::dtypeBytes(bufferDType(index)));
}

float *Executor::temp(TempPool &pool, int64_t count) {
  const uint64_t want = static_cast<uint64_t>(count);
  if (want > pool.size) {
    if (want > pool.capacity) {
      // Grows as std::vector::resize would (to max(2 x size, count)), so
      // peakTensorBytes reports what the host pools always reported.
      const uint64_t capacity = std::max(2 * pool.size, want);
      memory->release(pool.data, pool.capacity * sizeof(float));
      pool.data = nullptr;
      pool.capacity = 0;
      Status s = memory->allocate(capacity * sizeof(float), pool.data);
      if (!s.ok())
        throw std::runtime_error(s.toString());
      pool.capacity = capacity;
    }
    pool.size = want;
  }
  return reinterpret_cast<float *>(pool.data);
}

} // namespace loom
