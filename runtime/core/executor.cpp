//===- executor.cpp - Runs one stage of a verified program -----*- C++ -*-===//
//
// The arena comes from a BufferMemory (buffer_memory.h; cpu::HostMemory: an
// anonymous mmap, page aligned, zeroed, only touched pages cost memory), and
// every byte the host writes into it or reads from it (parameter init, the
// micro-batch's tokens / targets, the loss, the gradient norm, gradient
// zeroing, lr / step, pipeline stashes) goes through its copies. Each
// instruction maps to one KernelBackend call (cpu::CpuKernels); when an output
// shares bytes with an input and the kernel cannot run in place, the result is
// computed into a staging temporary and copied (the memory this costs is
// reported by peakTensorBytes). Gradient kernels overwrite their outputs
// (parameter gradients that the CPU kernels accumulate are zeroed first) and
// recompute LayerNorm statistics / attention probabilities into their scratch,
// so the backward never depends on what the forward left in the arena besides
// its named activations.
//
// Mixed precision (bf16_staging.h): an instruction with BF16 operands runs its
// fp32 kernel on fp32 copies in the executor's staging memory (allocated once
// at load, as large as the largest instruction needs) and rounds its BF16
// results back; Cast converts; a parameter with a master buffer starts with
// fp32 values in the master and their bf16 rounding in its buffer.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/executor.h"

#include "runtime/core/bf16_staging.h"
#include "runtime/core/bfloat16.h"
#include "runtime/core/param_init.h"
#include "runtime/cpu/cpu_kernels.h"
#include "runtime/cpu/host_memory.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <new>
#include <set>
#include <stdexcept>

namespace loom {

using program::DType;
using program::Opcode;
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
                        std::unique_ptr<BufferMemory> memory) {
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
      LOOM_RETURN_IF_ERROR(initParamBuffer(
          *ex->memory, ex->bufferData(v.buffer), ex->bufferDType(v.buffer), v,
          seed, init, v.sliceOffset, v.localShape));
      if (v.masterBuffer >= 0) {
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
  return arena + stageTable->buffers()->Get(index)->offset();
}

const void *Executor::bufferData(uint32_t index) const {
  return arena + stageTable->buffers()->Get(index)->offset();
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

Status Executor::evaluate(const int32_t *inputs, const int32_t *targets,
                          float &loss,
                          std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(!isTraining() && !isPipelined(),
             "stage " << stageTable->index()
                      << " is not an unpipelined evaluation program (use "
                         "trainStep or evaluatePipelined)");
  const int64_t rows = localBatch(), T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  LOOM_RETURN_IF_ERROR(
      copyTokensIn(stageTable->tokens(), inputs, rows * T, "token", 0));
  LOOM_RETURN_IF_ERROR(
      copyTokensIn(stageTable->targets(), targets, rows * T, "target", 0));
  LOOM_RETURN_IF_ERROR(run(timings));
  return readLoss(loss);
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

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

Status Executor::run(std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(!isPipelined(),
             "stage " << stageTable->index()
                      << " is a pipeline stage; it runs its actions "
                         "(trainStep, or evaluatePipelined without an "
                         "update)");
  return runList(stageTable->instructions(), false, 0, timings);
}

Status Executor::runList(
    const flatbuffers::Vector<flatbuffers::Offset<program::Instruction>> *list,
    bool update, uint32_t microbatch, std::vector<InstructionTiming> *timings,
    int32_t chunk, bool backward, bool flush) {
  if (!list)
    return Status::success();
  for (uint32_t i = 0; i < list->size(); ++i) {
    const program::Instruction *ins = list->Get(i);
    const int64_t start = timings ? steadyNowNs() : 0;
    Status s = completeInFlight(ins);
    try {
      if (s.ok())
        s = runInstruction(*ins);
    } catch (const std::bad_alloc &) {
      s = Status::error("out of memory allocating a temporary");
    } catch (const std::exception &e) {
      s = Status::error(std::string("cannot allocate a temporary: ") +
                        e.what());
    }
    if (!s.ok())
      return s.withContext(
          "stage " + std::to_string(stageTable->index()) + ", " +
          (chunk >= 0 ? "chunk " + std::to_string(chunk) +
                            (backward ? " backward " : " forward ")
                      : std::string()) +
          (update ? "update instruction #" : "instruction #") +
          std::to_string(i) + " '" +
          (ins->name() ? ins->name()->str() : std::string()) + "' (" +
          program::opcodeName(ins->opcode()) + ")");
    if (timings)
      timings->push_back(
          {i, start, steadyNowNs(), microbatch, update, chunk, backward});
    if (!inFlight.empty())
      comm->progress();
  }
  // Started all-reduces and sends complete before the list's buffers may
  // be reused. (A pipeline's sends are copied when started; waiting for
  // them after each action could block on a neighbour that first needs
  // this stage's next message, so the step flushes them once at its end.)
  LOOM_RETURN_IF_ERROR(completeInFlight(nullptr));
  return flush ? comm->flush() : Status::success();
}

bool Executor::isPipelined() const { return stageTable->pipeline() != nullptr; }

Status Executor::trainStepPipelined(const int32_t *inputs,
                                    const int32_t *targets,
                                    TrainStepResult &result,
                                    std::vector<InstructionTiming> *timings) {
  const program::Pipeline &pipe = *stageTable->pipeline();
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M, T = modelInfo->seq();
  // Stashed activations of the micro-batches in flight, by (chunk, mb): a
  // spare of buffer memory each (device-to-device copies, no host round
  // trip), returned to the spares when the backward has read it.
  struct Stashed {
    uint8_t *data = nullptr;
    uint64_t bytes = 0;
  };
  std::map<std::pair<uint32_t, uint32_t>, Stashed> stash;
  // Whatever is still stashed when the step ends (an error midway) goes
  // back to the spares, not astray.
  struct ReturnStashes {
    Executor &ex;
    std::map<std::pair<uint32_t, uint32_t>, Stashed> &held;
    ~ReturnStashes() {
      for (auto &entry : held)
        ex.returnSpare(entry.second.bytes, entry.second.data);
    }
  } returnStashes{*this, stash};
  int64_t stashBytes = 0; // held in `stash` now
  result.stashPeakBytes = 0;
  double lossSum = 0;
  // Forwards that produce a loss: at most one per (chunk, micro-batch).
  const int64_t lossCapacity = static_cast<int64_t>(pipe.actions()->size());
  int64_t lossCount = 0;
  const int64_t start = steadyNowNs();
  recvWaitNs = 0;
  for (const program::PipelineAction *a : *pipe.actions()) {
    const program::PipelineChunk &chunk = *pipe.chunks()->Get(a->chunk());
    const uint32_t mb = a->microbatch();
    // 1. The micro-batch's tokens and targets, when this stage reads them.
    LOOM_RETURN_IF_ERROR(copyTokensIn(stageTable->tokens(),
                                      inputs + mb * rows * T, rows * T, "token",
                                      mb * rows));
    LOOM_RETURN_IF_ERROR(copyTokensIn(stageTable->targets(),
                                      targets + mb * rows * T, rows * T,
                                      "target", mb * rows));
    const auto key = std::make_pair(a->chunk(), mb);
    if (!a->backward()) {
      // 2. Forward; keep what the backward needs, and the loss.
      LOOM_RETURN_IF_ERROR(runList(chunk.forward(), false, mb, timings,
                                   static_cast<int32_t>(a->chunk()), false,
                                   /*flush=*/false));
      Stashed &kept = stash[key];
      if (chunk.stash_out())
        for (uint32_t b : *chunk.stash_out())
          kept.bytes += bufferBytes(b);
      if (kept.bytes > 0) {
        LOOM_RETURN_IF_ERROR(
            takeSpare(kept.bytes, kept.data, /*countInPeak=*/false));
        uint64_t at = 0;
        for (uint32_t b : *chunk.stash_out()) {
          LOOM_RETURN_IF_ERROR(
              memory->copy(kept.data + at, bufferData(b), bufferBytes(b)));
          at += bufferBytes(b);
        }
      }
      stashBytes += static_cast<int64_t>(kept.bytes);
      result.stashPeakBytes = std::max(result.stashPeakBytes, stashBytes);
      if (chunk.loss() >= 0) {
        // Kept on the device; read back once after the schedule.
        float *slot = nullptr;
        LOOM_RETURN_IF_ERROR(lossSlot(lossCount, lossCapacity, slot));
        LOOM_RETURN_IF_ERROR(
            memory->copy(slot, bufferData(static_cast<uint32_t>(chunk.loss())),
                         sizeof(float)));
        ++lossCount;
      }
      continue;
    }
    // 3. Backward, from the micro-batch's stash.
    auto it = stash.find(key);
    LOOM_CHECK(it != stash.end(), "stage " << stageTable->index()
                                           << ": backward of micro-batch "
                                           << mb << " before its forward");
    uint64_t at = 0;
    if (chunk.stash_in())
      for (uint32_t b : *chunk.stash_in()) {
        LOOM_CHECK(at + bufferBytes(b) <= it->second.bytes,
                   "stage " << stageTable->index()
                            << ": the backward of micro-batch " << mb
                            << " reads more stashed bytes than its forward "
                               "kept");
        LOOM_RETURN_IF_ERROR(
            memory->copy(bufferData(b), it->second.data + at, bufferBytes(b)));
        at += bufferBytes(b);
      }
    stashBytes -= static_cast<int64_t>(it->second.bytes);
    returnSpare(it->second.bytes, it->second.data);
    stash.erase(it);
    LOOM_RETURN_IF_ERROR(runList(chunk.backward(), false, mb, timings,
                                 static_cast<int32_t>(a->chunk()), true,
                                 /*flush=*/false));
  }
  LOOM_RETURN_IF_ERROR(comm->flush());
  LOOM_RETURN_IF_ERROR(sumLossSlots(lossCount, lossSum));
  result.pipelineNs = steadyNowNs() - start;
  result.pipelineWaitNs = recvWaitNs;
  // 4. The loss lives on the last stage: sum it over the pipeline.
  float loss = static_cast<float>(lossSum);
  for (uint32_t a = 0; a < comm->mesh().size(); ++a)
    if (comm->mesh()[a].name == "pp" && comm->mesh()[a].size > 1)
      LOOM_RETURN_IF_ERROR(comm->allReduceHost(&loss, 1, DType::F32,
                                               program::Reduction::Sum, {a}));
  result.loss = loss / static_cast<float>(M);
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Training
//===----------------------------------------------------------------------===//

bool Executor::isTraining() const {
  const auto *update = stageTable->update_instructions();
  return update && update->size() > 0;
}

Status Executor::zeroGradients() {
  for (const ParamView &p : paramViews)
    if (p.gradBuffer >= 0)
      LOOM_RETURN_IF_ERROR(memory->fillZero(
          bufferData(static_cast<uint32_t>(p.gradBuffer)),
          static_cast<uint64_t>(bufferNumel(p.gradBuffer) *
                                program::dtypeBytes(bufferDType(
                                    static_cast<uint32_t>(p.gradBuffer))))));
  return Status::success();
}

Status Executor::runUpdate(int64_t step, float lr,
                           std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(step >= 1, "training step numbers are 1-based, got " << step);
  const float stepValue = static_cast<float>(step);
  if (stageTable->lr() >= 0)
    LOOM_RETURN_IF_ERROR(memory->copyIn(
        bufferData(static_cast<uint32_t>(stageTable->lr())), &lr,
        sizeof(float)));
  if (stageTable->step() >= 0)
    LOOM_RETURN_IF_ERROR(memory->copyIn(
        bufferData(static_cast<uint32_t>(stageTable->step())), &stepValue,
        sizeof(float)));
  return runList(stageTable->update_instructions(), true, 0, timings);
}

Status Executor::checkMicrobatchBuffers(int64_t rows, int64_t T) const {
  for (int32_t b : {stageTable->tokens(), stageTable->targets()})
    LOOM_CHECK(b < 0 || bufferNumel(static_cast<uint32_t>(b)) == rows * T,
               "stage " << stageTable->index() << ": buffer "
                        << program::shapeString(shapes[b])
                        << " does not hold one micro-batch of " << rows << " x "
                        << T << " tokens");
  return Status::success();
}

Status Executor::trainStep(const int32_t *inputs, const int32_t *targets,
                           int64_t step, float lr, TrainStepResult &result,
                           std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(isTraining(), "stage " << stageTable->index()
                                    << " is not a training program (it has "
                                       "no update_instructions)");
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M, T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  // 1. Gradients accumulate over the micro-batches from zero.
  LOOM_RETURN_IF_ERROR(zeroGradients());
  double lossSum = 0;
  if (isPipelined())
    LOOM_RETURN_IF_ERROR(
        trainStepPipelined(inputs, targets, result, timings));
  for (int64_t i = 0; !isPipelined() && i < M; ++i) {
    // 2. Micro-batch i is rows [i*b, (i+1)*b) of the batch.
    LOOM_RETURN_IF_ERROR(copyTokensIn(stageTable->tokens(),
                                      inputs + i * rows * T, rows * T, "token",
                                      i * rows));
    LOOM_RETURN_IF_ERROR(copyTokensIn(stageTable->targets(),
                                      targets + i * rows * T, rows * T,
                                      "target", i * rows));
    LOOM_RETURN_IF_ERROR(runList(stageTable->instructions(), false,
                                 static_cast<uint32_t>(i), timings));
    if (stageTable->loss() >= 0) {
      // Kept on the device; read back once after the last micro-batch.
      float *slot = nullptr;
      LOOM_RETURN_IF_ERROR(lossSlot(i, M, slot));
      LOOM_RETURN_IF_ERROR(memory->copy(
          slot, bufferData(static_cast<uint32_t>(stageTable->loss())),
          sizeof(float)));
    }
  }
  if (!isPipelined() && stageTable->loss() >= 0)
    LOOM_RETURN_IF_ERROR(sumLossSlots(M, lossSum));
  if (!isPipelined())
    result.loss = static_cast<float>(lossSum / static_cast<double>(M));
  // 3. Clip and update once.
  LOOM_RETURN_IF_ERROR(runUpdate(step, lr, timings));
  result.gradNorm = std::numeric_limits<float>::quiet_NaN();
  if (stageTable->grad_norm() >= 0)
    LOOM_RETURN_IF_ERROR(memory->copyOut(
        &result.gradNorm,
        bufferData(static_cast<uint32_t>(stageTable->grad_norm())),
        sizeof(float)));
  return Status::success();
}

Status Executor::evaluatePipelined(const int32_t *inputs,
                                   const int32_t *targets,
                                   TrainStepResult &result,
                                   std::vector<InstructionTiming> *timings) {
  LOOM_CHECK(isPipelined() && !isTraining(),
             "stage " << stageTable->index()
                      << " is not an evaluation's pipeline stage (a "
                         "pipeline stage without update_instructions)");
  const int64_t M = stageTable->microbatches();
  const int64_t rows = localBatch() / M, T = modelInfo->seq();
  LOOM_RETURN_IF_ERROR(checkMicrobatchBuffers(rows, T));
  // The forward actions alone: nothing is stashed (the chunks keep
  // nothing), the loss is summed over the pipeline.
  LOOM_RETURN_IF_ERROR(trainStepPipelined(inputs, targets, result, timings));
  result.gradNorm = std::numeric_limits<float>::quiet_NaN();
  return Status::success();
}

//===----------------------------------------------------------------------===//
// One instruction
//===----------------------------------------------------------------------===//

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

Status Executor::runInstruction(const program::Instruction &ins) {
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
  auto i32 = [&](uint32_t b) { return static_cast<int32_t *>(bufferData(b)); };

  const Opcode op = ins.opcode();
  // An all-reduce writes its outputs itself (in place, or unpacked from a
  // bucket, possibly after it completes in flight).
  if (op == Opcode::AllReduce)
    return runAllReduce(ins, in, out, scr);
  // 0. Mixed precision: a backend that runs the opcode on bf16 itself gets
  //    the buffers as they are; otherwise every BF16 input and scratch is
  //    widened into an fp32 slot of the staging memory, and the kernel
  //    reads (f32) and writes (dsts) the slots instead of the buffers.
  static const BF16StagingPlan kNoStaging;
  const auto planned = bf16Plans.find(&ins);
  const BF16StagingPlan &bf16 =
      planned == bf16Plans.end() ? kNoStaging : planned->second;
  if (!bf16.empty() && kernels->handlesBF16Natively(op))
    return runBF16Natively(ins, in, out, scr);
  auto slotData = [&](int32_t s) {
    return reinterpret_cast<float *>(bf16Staging +
                                     bf16.slots[static_cast<size_t>(s)].offset);
  };
  // What the kernel reads for an input or scratch buffer.
  std::vector<std::pair<uint32_t, float *>> readFrom;
  for (size_t j = 0; j < bf16.inputSlot.size(); ++j)
    if (bf16.inputSlot[j] >= 0)
      readFrom.emplace_back(in[j], slotData(bf16.inputSlot[j]));
  for (size_t j = 0; j < bf16.scratchSlot.size(); ++j)
    if (bf16.scratchSlot[j] >= 0)
      readFrom.emplace_back(scr[j], slotData(bf16.scratchSlot[j]));
  for (size_t s = 0; s < bf16.slots.size(); ++s)
    if (bf16.slots[s].widen)
      LOOM_RETURN_IF_ERROR(kernels->convertBF16ToF32(
          slotData(static_cast<int32_t>(s)),
          static_cast<const uint16_t *>(bufferData(bf16.slots[s].buffer)),
          bf16.slots[s].count));
  auto f32 = [&](uint32_t b) {
    for (const auto &[buffer, data] : readFrom)
      if (buffer == b)
        return data;
    return static_cast<float *>(bufferData(b));
  };
  // 1. Where each output is written: in place, or into a staging temporary
  //    when it shares bytes with an input the kernel still reads. Copy uses
  //    memmove; AdamW updates its state in place by contract.
  std::vector<void *> dsts(out.size());
  std::vector<bool> staged(out.size(), false);
  if (staging.size() < out.size())
    staging.resize(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (!bf16.outputSlot.empty() && bf16.outputSlot[k] >= 0) {
      dsts[k] = slotData(bf16.outputSlot[k]); // rounded back in step 3
      continue;
    }
    const Range r = range(out[k]);
    if (op != Opcode::Copy && op != Opcode::AdamW)
      for (size_t j = 0; j < in.size(); ++j) {
        const Range ri = range(in[j]);
        if (ri.overlaps(r) && !(ri == r && kernelMayAlias(op, j)))
          staged[k] = true;
      }
    const int64_t bytes = static_cast<int64_t>(r.end - r.begin);
    dsts[k] = staged[k] ? static_cast<void *>(temp(staging[k], (bytes + 3) / 4))
                        : bufferData(out[k]);
  }
  const uint32_t o = out.empty() ? 0 : out[0];
  void *dst = dsts.empty() ? nullptr : dsts[0];
  float *dstF = static_cast<float *>(dst);
  auto outF = [&](size_t k) { return static_cast<float *>(dsts[k]); };
  const int64_t outBytes =
      out.empty() ? 0 : static_cast<int64_t>(range(o).end - range(o).begin);

  // 2. The kernel (KernelBackend: this executor's buffer pointers only).
  KernelBackend &k = *kernels;
  switch (op) {
  case Opcode::Embedding: {
    const auto &t = shapes[in[0]];
    if (ins.axes() && ins.axes()->size() > 0) {
      // Vocab-parallel: this rank holds block groupRank(axes) of the rows.
      std::vector<uint32_t> axes(ins.axes()->begin(), ins.axes()->end());
      const int64_t rows = t[0], n = comm->groupSize(axes);
      LOOM_RETURN_IF_ERROR(k.embeddingForwardRows(
          dstF, i32(in[1]), f32(in[0]), bufferNumel(in[1]), rows * n,
          comm->groupRank(axes) * rows, rows, t[1]));
      break;
    }
    LOOM_RETURN_IF_ERROR(k.embeddingForward(dstF, i32(in[1]), f32(in[0]),
                                            bufferNumel(in[1]), t[0], t[1]));
    break;
  }
  case Opcode::Add: {
    const int64_t inner = bufferNumel(in[1]);
    const int64_t outer = bufferNumel(in[0]) / inner;
    if (outer == 1)
      LOOM_RETURN_IF_ERROR(k.add(dstF, f32(in[0]), f32(in[1]), inner));
    else
      LOOM_RETURN_IF_ERROR(
          k.addBroadcast(dstF, f32(in[0]), f32(in[1]), outer, inner));
    break;
  }
  case Opcode::Linear: {
    // The weight is [K, out...]: its output dimensions are one N.
    const auto &w = shapes[in[1]];
    const int64_t K = w[0], N = bufferNumel(in[1]) / K;
    const int64_t M = bufferNumel(in[0]) / K;
    LOOM_RETURN_IF_ERROR(k.linearForward(dstF, f32(in[0]), f32(in[1]),
                                         in.size() == 3 ? f32(in[2]) : nullptr,
                                         M, K, N));
    break;
  }
  case Opcode::Matmul: {
    const auto &r = shapes[in[1]];
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = bufferNumel(in[0]) / K;
    LOOM_RETURN_IF_ERROR(k.gemm(false, t, M, N, K, 1.0f, f32(in[0]), K,
                                f32(in[1]), r[1], 0.0f, dstF, N));
    break;
  }
  case Opcode::LayerNorm: {
    const int64_t C = shapes[in[0]].back();
    const int64_t N = bufferNumel(in[0]) / C;
    float *mean = scr.empty() ? temp(workspace, N) : f32(scr[0]);
    float *rstd = scr.empty() ? temp(workspace2, N) : f32(scr[1]);
    LOOM_RETURN_IF_ERROR(k.layernormForward(dstF, mean, rstd, f32(in[0]),
                                            f32(in[1]), f32(in[2]), N, C,
                                            static_cast<float>(ins.epsilon())));
    break;
  }
  case Opcode::Gelu:
    LOOM_RETURN_IF_ERROR(k.geluForward(dstF, f32(in[0]), bufferNumel(in[0])));
    break;
  case Opcode::Softmax: {
    const int64_t C = shapes[in[0]].back();
    LOOM_RETURN_IF_ERROR(
        k.softmaxForward(dstF, f32(in[0]), bufferNumel(in[0]) / C, C));
    break;
  }
  case Opcode::Attention: {
    // [B, T, 3C] or [B, T, 3, C]: the same bytes.
    const auto &q = shapes[in[0]];
    const int64_t B = q[0], T = q[1], C = q.size() == 4 ? q[3] : q[2] / 3,
                  NH = ins.num_heads();
    float *att = scr.empty() ? temp(workspace, B * NH * T * T) : f32(scr[0]);
    LOOM_RETURN_IF_ERROR(
        k.attentionForward(dstF, att, f32(in[0]), B, T, C, NH));
    break;
  }
  case Opcode::CrossEntropy: {
    const int64_t V = shapes[in[0]].back();
    const int64_t N = bufferNumel(in[0]) / V;
    // Columns beyond the model's vocabulary are padding (Megatron style).
    const int64_t validV = std::min<int64_t>(V, modelInfo->vocab_size());
    float *losses = scr.empty() ? nullptr : f32(scr[0]);
    // `value` > 0: the global token count (tokens split across ranks).
    LOOM_RETURN_IF_ERROR(k.crossEntropyForward(
        dstF, losses, f32(in[0]), i32(in[1]), N, V, validV, ins.value()));
    break;
  }
  case Opcode::RowMax:
  case Opcode::CrossEntropySums:
  case Opcode::CrossEntropySumsGrad: {
    // This rank's columns of the vocabulary: block groupRank(axes) of it.
    const uint32_t logits = op == Opcode::RowMax ? in[0]
                            : op == Opcode::CrossEntropySums ? in[0]
                                                             : in[1];
    const int64_t V = shapes[logits].back();
    const int64_t N = bufferNumel(logits) / V;
    int64_t offset = 0, blocks = 1;
    if (ins.axes() && ins.axes()->size() > 0) {
      std::vector<uint32_t> axes(ins.axes()->begin(), ins.axes()->end());
      offset = comm->groupRank(axes) * V;
      blocks = comm->groupSize(axes);
    }
    // Columns beyond the model's vocabulary are padding, as for CrossEntropy.
    const int64_t validV = std::min<int64_t>(V * blocks, modelInfo->vocab_size());
    if (op == Opcode::RowMax) {
      LOOM_RETURN_IF_ERROR(
          k.crossEntropyRowMax(dstF, f32(in[0]), N, V, offset, validV));
    } else if (op == Opcode::CrossEntropySums) {
      LOOM_RETURN_IF_ERROR(k.crossEntropySums(outF(0), outF(1), f32(in[0]),
                                              f32(in[1]), i32(in[2]), N, V,
                                              offset, validV));
    } else {
      const double tokens = ins.value() > 0 ? ins.value() : double(N);
      LOOM_RETURN_IF_ERROR(k.crossEntropySumsBackward(
          dstF, f32(in[0]), f32(in[1]), f32(in[2]), f32(in[3]), i32(in[4]), N,
          V, offset, validV, tokens));
    }
    break;
  }
  case Opcode::CrossEntropyFromSums: {
    const int64_t N = bufferNumel(in[0]);
    const double tokens = ins.value() > 0 ? ins.value() : double(N);
    LOOM_RETURN_IF_ERROR(k.crossEntropyFromSums(dstF, f32(in[0]), f32(in[1]),
                                                f32(in[2]), N, tokens));
    break;
  }
  case Opcode::Copy:
    LOOM_RETURN_IF_ERROR(k.copy(dst, bufferData(in[0]), outBytes));
    break;
  case Opcode::Transpose: {
    std::vector<int64_t> perm; // absent for a scalar
    if (ins.permutation())
      perm.assign(ins.permutation()->begin(), ins.permutation()->end());
    LOOM_RETURN_IF_ERROR(k.transpose(dst, bufferData(in[0]), shapes[in[0]],
                                     perm,
                                     program::dtypeBytes(bufferDType(o))));
    break;
  }
  case Opcode::Slice:
    LOOM_RETURN_IF_ERROR(k.sliceDim(
        dst, bufferData(in[0]), shapes[in[0]], ins.dim(), ins.offset(),
        shapes[o][ins.dim()], program::dtypeBytes(bufferDType(o))));
    break;
  case Opcode::LocalSlice: {
    // This rank's block (group-rank order, as AllGather orders blocks); no
    // communication, so nothing is counted.
    std::vector<uint32_t> axes;
    if (ins.axes())
      axes.assign(ins.axes()->begin(), ins.axes()->end());
    const int64_t dim = ins.dim(), extent = shapes[o][dim];
    LOOM_RETURN_IF_ERROR(k.sliceDim(dst, bufferData(in[0]), shapes[in[0]], dim,
                                    comm->groupRank(axes) * extent, extent,
                                    program::dtypeBytes(bufferDType(o))));
    break;
  }
  case Opcode::Concat: {
    std::vector<const void *> srcs;
    std::vector<int64_t> extents;
    for (uint32_t b : in) {
      srcs.push_back(bufferData(b));
      extents.push_back(shapes[b][ins.dim()]);
    }
    LOOM_RETURN_IF_ERROR(k.concatDim(dst, srcs, extents, shapes[o], ins.dim(),
                                     program::dtypeBytes(bufferDType(o))));
    break;
  }
  case Opcode::EmbeddingGrad: {
    const auto &t = shapes[o];
    LOOM_RETURN_IF_ERROR(k.embeddingBackward(dstF, f32(in[0]), i32(in[1]),
                                             bufferNumel(in[1]), t[0], t[1]));
    break;
  }
  case Opcode::ReduceLeading: {
    const int64_t inner = bufferNumel(o);
    LOOM_RETURN_IF_ERROR(
        k.reduceLeading(dstF, f32(in[0]), bufferNumel(in[0]) / inner, inner));
    break;
  }
  case Opcode::LinearGrad: {
    const auto &w = shapes[in[2]];
    const int64_t K = w[0], N = bufferNumel(in[2]) / K;
    const int64_t M = bufferNumel(in[1]) / K;
    const float *dout = f32(in[0]);
    // dinput[M,K] = dout[M,N] weight^T; dweight[K,N] = input^T dout.
    LOOM_RETURN_IF_ERROR(k.gemm(false, true, M, K, N, 1.0f, dout, N, f32(in[2]),
                                N, 0.0f, outF(0), K));
    LOOM_RETURN_IF_ERROR(k.gemm(true, false, K, N, M, 1.0f, f32(in[1]), K, dout,
                                N, 0.0f, outF(1), N));
    if (out.size() == 3)
      LOOM_RETURN_IF_ERROR(k.columnSum(outF(2), dout, M, N));
    break;
  }
  case Opcode::MatmulGrad: {
    const auto &r = shapes[in[2]];
    const bool t = ins.transpose_rhs();
    const int64_t K = t ? r[1] : r[0], N = t ? r[0] : r[1];
    const int64_t M = bufferNumel(in[1]) / K;
    const float *dout = f32(in[0]), *lhs = f32(in[1]), *rhs = f32(in[2]);
    // out[M,N] = lhs[M,K] op(rhs)[K,N], op(rhs) = rhs^T when transposed.
    // dlhs = dout op(rhs)^T; drhs = lhs^T dout, or dout^T lhs transposed.
    LOOM_RETURN_IF_ERROR(
        k.gemm(false, !t, M, K, N, 1.0f, dout, N, rhs, r[1], 0.0f, outF(0), K));
    if (t)
      LOOM_RETURN_IF_ERROR(k.gemm(true, false, N, K, M, 1.0f, dout, N, lhs, K,
                                  0.0f, outF(1), K));
    else
      LOOM_RETURN_IF_ERROR(k.gemm(true, false, K, N, M, 1.0f, lhs, K, dout, N,
                                  0.0f, outF(1), N));
    break;
  }
  case Opcode::LayerNormGrad: {
    const int64_t C = shapes[in[1]].back();
    const int64_t N = bufferNumel(in[1]) / C;
    float *mean = scr.empty() ? temp(workspace, N) : f32(scr[0]);
    float *rstd = scr.empty() ? temp(workspace2, N) : f32(scr[1]);
    LOOM_RETURN_IF_ERROR(k.layernormGrad(outF(0), outF(1), outF(2), f32(in[0]),
                                         f32(in[1]), f32(in[2]), mean, rstd, N,
                                         C, static_cast<float>(ins.epsilon())));
    break;
  }
  case Opcode::GeluGrad:
    LOOM_RETURN_IF_ERROR(
        k.geluBackward(dstF, f32(in[1]), f32(in[0]), bufferNumel(in[1])));
    break;
  case Opcode::SoftmaxGrad: {
    const int64_t C = shapes[in[1]].back();
    LOOM_RETURN_IF_ERROR(k.softmaxBackward(dstF, f32(in[0]), f32(in[1]),
                                           bufferNumel(in[1]) / C, C));
    break;
  }
  case Opcode::AttentionGrad: {
    const auto &q = shapes[in[1]];
    const int64_t B = q[0], T = q[1], C = q.size() == 4 ? q[3] : q[2] / 3,
                  NH = ins.num_heads();
    float *att = scr.empty() ? temp(workspace, B * NH * T * T) : f32(scr[0]);
    LOOM_RETURN_IF_ERROR(
        k.attentionGrad(dstF, f32(in[0]), f32(in[1]), att, B, T, C, NH));
    break;
  }
  case Opcode::CrossEntropyGrad: {
    const int64_t V = shapes[in[1]].back();
    const int64_t N = bufferNumel(in[1]) / V;
    const int64_t validV = std::min<int64_t>(V, modelInfo->vocab_size());
    LOOM_RETURN_IF_ERROR(k.crossEntropyBackward(
        dstF, f32(in[0]), f32(in[1]), i32(in[2]), N, V, validV, ins.value()));
    break;
  }
  case Opcode::SliceGrad:
    LOOM_RETURN_IF_ERROR(k.sliceDimGrad(
        dst, bufferData(in[0]), shapes[o], ins.dim(), ins.offset(),
        shapes[in[0]][ins.dim()], program::dtypeBytes(bufferDType(o))));
    break;
  case Opcode::Fill: {
    const int64_t n = bufferNumel(o);
    if (bufferDType(o) == DType::I32)
      LOOM_RETURN_IF_ERROR(k.fillI32(static_cast<int32_t *>(dst), n,
                                     static_cast<int32_t>(ins.value())));
    else
      LOOM_RETURN_IF_ERROR(k.fillF32(dstF, n, static_cast<float>(ins.value())));
    break;
  }
  case Opcode::SumSquares: {
    std::vector<BufferSpan> tensors;
    for (uint32_t b : in)
      tensors.push_back({f32(b), bufferNumel(b)});
    LOOM_RETURN_IF_ERROR(k.sumSquares(dstF, tensors));
    break;
  }
  case Opcode::ClipCoef:
    LOOM_RETURN_IF_ERROR(
        k.clipCoef(outF(0), outF(1), f32(in[0]), ins.max_norm()));
    break;
  case Opcode::AdamW: {
    AdamWHyperParams hyper;
    hyper.beta1 = ins.beta1();
    hyper.beta2 = ins.beta2();
    hyper.eps = ins.adam_eps();
    hyper.weightDecay = ins.weight_decay();
    // The kernel updates in place: an output that is not its input buffer
    // (ZeRO's fresh parameter shard) starts as a copy of it.
    const uint32_t state[3] = {in[0], in[2], in[3]};
    for (size_t j = 0; j < 3; ++j)
      if (outF(j) != f32(state[j]))
        LOOM_RETURN_IF_ERROR(k.copy(outF(j), f32(state[j]),
                                    bufferNumel(state[j]) *
                                        static_cast<int64_t>(sizeof(float))));
    LOOM_RETURN_IF_ERROR(k.adamw(outF(0), f32(in[1]), outF(1), outF(2),
                                 bufferNumel(in[0]), f32(in[4]), f32(in[5]),
                                 f32(in[6]), hyper));
    break;
  }
  case Opcode::Cast: {
    const int64_t n = bufferNumel(in[0]);
    if (bufferDType(o) == DType::BF16)
      LOOM_RETURN_IF_ERROR(
          k.convertF32ToBF16(static_cast<uint16_t *>(dst), f32(in[0]), n));
    else
      LOOM_RETURN_IF_ERROR(k.convertBF16ToF32(
          dstF, static_cast<const uint16_t *>(bufferData(in[0])), n));
    break;
  }
  case Opcode::AllGather:
  case Opcode::ReduceScatter:
  case Opcode::AllToAll:
  case Opcode::Send:
  case Opcode::Recv:
    LOOM_RETURN_IF_ERROR(runCollective(ins, in, out, dst));
    break;
  default:
    LOOM_ERROR("opcode " << program::opcodeName(op)
                         << " cannot run on this runtime");
  }
  // 3. Staged outputs to their buffers; fp32 results of BF16 outputs and
  //    scratch rounded into them.
  for (size_t k = 0; k < out.size(); ++k)
    if (staged[k])
      LOOM_RETURN_IF_ERROR(
          kernels->copy(bufferData(out[k]), dsts[k],
                 static_cast<int64_t>(range(out[k]).end - range(out[k]).begin)));
  for (size_t s = 0; s < bf16.slots.size(); ++s)
    if (bf16.slots[s].round)
      LOOM_RETURN_IF_ERROR(kernels->convertF32ToBF16(
          static_cast<uint16_t *>(bufferData(bf16.slots[s].buffer)),
          slotData(static_cast<int32_t>(s)), bf16.slots[s].count));
  return Status::success();
}

Status Executor::runBF16Natively(const program::Instruction &ins,
                                 const std::vector<uint32_t> &in,
                                 const std::vector<uint32_t> &out,
                                 const std::vector<uint32_t> &scr) {
  const Opcode op = ins.opcode();
  auto range = [&](uint32_t b) {
    const uint64_t off = stageTable->buffers()->Get(b)->offset();
    return Range{
        off, off + static_cast<uint64_t>(bufferNumel(b) *
                                         program::dtypeBytes(bufferDType(b)))};
  };
  auto typed = [&](uint32_t b, void *data) {
    return TypedOperand{data, bufferDType(b), &shapes[b]};
  };
  std::vector<TypedOperand> inputs, outputs, scratch;
  for (uint32_t b : in)
    inputs.push_back(typed(b, bufferData(b)));
  for (uint32_t b : scr)
    scratch.push_back(typed(b, bufferData(b)));
  // An output that overlaps an input other than as the opcode's in-place
  // operand goes to a temporary, copied to its buffer after the kernel (as
  // step 1 of runInstruction does for the fp32 kernels).
  std::vector<bool> staged(out.size(), false);
  if (staging.size() < out.size())
    staging.resize(out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    const Range r = range(out[k]);
    if (op != Opcode::AdamW)
      for (size_t j = 0; j < in.size(); ++j) {
        const Range ri = range(in[j]);
        if (ri.overlaps(r) && !(ri == r && kernelMayAlias(op, j)))
          staged[k] = true;
      }
    const int64_t bytes = static_cast<int64_t>(r.end - r.begin);
    outputs.push_back(
        typed(out[k],
              staged[k] ? static_cast<void *>(temp(staging[k], (bytes + 3) / 4))
                        : bufferData(out[k])));
  }
  BF16InstructionContext context;
  context.vocabSize = modelInfo->vocab_size();
  if (ins.axes() && ins.axes()->size() > 0) {
    std::vector<uint32_t> axes(ins.axes()->begin(), ins.axes()->end());
    context.groupRank = comm->groupRank(axes);
    context.groupSize = comm->groupSize(axes);
  }
  LOOM_RETURN_IF_ERROR(
      kernels->runBF16Natively(ins, inputs, outputs, scratch, context));
  for (size_t k = 0; k < out.size(); ++k)
    if (staged[k])
      LOOM_RETURN_IF_ERROR(kernels->copy(
          bufferData(out[k]), outputs[k].data,
          static_cast<int64_t>(range(out[k]).end - range(out[k]).begin)));
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

Status Executor::runAllReduce(const program::Instruction &ins,
                              const std::vector<uint32_t> &in,
                              const std::vector<uint32_t> &out,
                              const std::vector<uint32_t> &scr) {
  std::vector<uint32_t> axes;
  if (ins.axes())
    axes.assign(ins.axes()->begin(), ins.axes()->end());
  const DType dt = bufferDType(in[0]);
  const int64_t eb = program::dtypeBytes(dt);
  // One value reduces in place in its output; a bucket is packed into its
  // scratch buffer, reduced there and unpacked into the outputs.
  const bool bucket = in.size() > 1;
  void *buf = bucket ? bufferData(scr[0]) : bufferData(out[0]);
  int64_t count = 0;
  for (size_t k = 0; k < in.size(); ++k) {
    const int64_t n = bufferNumel(in[k]);
    uint8_t *at = static_cast<uint8_t *>(buf) + count * eb;
    if (at != bufferData(in[k]))
      LOOM_RETURN_IF_ERROR(kernels->copy(at, bufferData(in[k]), n * eb));
    count += n;
  }
  auto unpack = [this, buf, eb, out]() -> Status {
    const uint8_t *from = static_cast<const uint8_t *>(buf);
    for (uint32_t b : out) {
      const int64_t bytes = bufferNumel(b) * eb;
      LOOM_RETURN_IF_ERROR(kernels->copy(bufferData(b), from, bytes));
      from += bytes;
    }
    return Status::success();
  };
  if (ins.members() && ins.members()->size() > 0) {
    // Among some coordinates of one axis (a pipeline's shared parameter).
    std::vector<int64_t> members(ins.members()->begin(), ins.members()->end());
    return comm->allReduceAmong(buf, count, dt, ins.reduction(), axes[0],
                                members);
  }
  if (!ins.async_collective()) {
    LOOM_RETURN_IF_ERROR(
        comm->allReduce(buf, count, dt, ins.reduction(), axes));
    return bucket ? unpack() : Status::success();
  }
  InFlight flight;
  LOOM_RETURN_IF_ERROR(comm->startAllReduce(buf, count, dt, ins.reduction(),
                                            axes, flight.ticket));
  for (uint32_t b : out)
    flight.busy.push_back(byteRange(b));
  if (bucket) {
    flight.busy.push_back(byteRange(scr[0]));
    flight.finish = unpack;
  }
  inFlight.push_back(std::move(flight));
  return Status::success();
}

std::pair<uint64_t, uint64_t> Executor::byteRange(uint32_t b) const {
  const uint64_t off = stageTable->buffers()->Get(b)->offset();
  return {off, off + static_cast<uint64_t>(
                         bufferNumel(b) * program::dtypeBytes(bufferDType(b)))};
}

Status Executor::completeInFlight(const program::Instruction *ins) {
  if (inFlight.empty())
    return Status::success();
  std::vector<std::pair<uint64_t, uint64_t>> touched;
  if (ins)
    for (const auto *list : {ins->inputs(), ins->outputs(), ins->scratch()})
      if (list)
        for (uint32_t b : *list)
          touched.push_back(byteRange(b));
  auto overlaps = [&](const InFlight &f) {
    for (const auto &[b0, e0] : f.busy)
      for (const auto &[b1, e1] : touched)
        if (b0 < e1 && b1 < e0)
          return true;
    return false;
  };
  for (size_t i = 0; i < inFlight.size();) {
    if (ins && !overlaps(inFlight[i])) {
      ++i;
      continue;
    }
    InFlight f = std::move(inFlight[i]);
    inFlight.erase(inFlight.begin() + static_cast<std::ptrdiff_t>(i));
    LOOM_RETURN_IF_ERROR(comm->complete(f.ticket));
    if (f.finish)
      LOOM_RETURN_IF_ERROR(f.finish());
  }
  return Status::success();
}

Status Executor::runCollective(const program::Instruction &ins,
                               const std::vector<uint32_t> &in,
                               const std::vector<uint32_t> &out, void *dst) {
  std::vector<uint32_t> axes;
  if (ins.axes())
    axes.assign(ins.axes()->begin(), ins.axes()->end());
  const Opcode op = ins.opcode();
  const int64_t n = comm->groupSize(axes);
  auto outerOf = [](const std::vector<int64_t> &shape, int64_t dim) {
    int64_t outer = 1;
    for (int64_t d = 0; d < dim; ++d)
      outer *= shape[d];
    return outer;
  };
  auto tempBytes = [&](TempPool &pool, int64_t bytes) {
    return static_cast<void *>(temp(pool, (bytes + 3) / 4));
  };
  switch (op) {
  case Opcode::AllGather: {
    const DType dt = bufferDType(in[0]);
    const int64_t eb = program::dtypeBytes(dt), count = bufferNumel(in[0]);
    const auto &shape = shapes[in[0]];
    const int64_t dim = ins.dim();
    if (ins.async_collective()) {
      // Prefetch: in flight until an instruction touches input or output.
      InFlight flight;
      flight.busy = {byteRange(in[0]), byteRange(out[0])};
      void *into = dst;
      if (outerOf(shape, dim) != 1) {
        // Received into a spare temporary of buffer memory (several
        // gathers may be in flight), unpacked into the output on completion.
        const uint64_t bytes = static_cast<uint64_t>(count * n * eb);
        uint8_t *received = nullptr;
        LOOM_RETURN_IF_ERROR(takeSpare(bytes, received));
        into = received;
        flight.finish = [this, dst, received, bytes, shape, dim, n,
                         eb]() -> Status {
          Status s = kernels->unpackBlocks(dst, received, shape, dim, n, eb);
          returnSpare(bytes, received);
          return s;
        };
      }
      LOOM_RETURN_IF_ERROR(comm->startAllGather(bufferData(in[0]), into, count,
                                                dt, axes, flight.ticket));
      inFlight.push_back(std::move(flight));
      return Status::success();
    }
    if (outerOf(shape, dim) == 1)
      return comm->allGather(bufferData(in[0]), dst, count, dt, axes);
    void *gathered = tempBytes(workspace, count * n * eb);
    LOOM_RETURN_IF_ERROR(
        comm->allGather(bufferData(in[0]), gathered, count, dt, axes));
    return kernels->unpackBlocks(dst, gathered, shape, dim, n, eb);
  }
  case Opcode::ReduceScatter: {
    const DType dt = bufferDType(in[0]);
    const int64_t eb = program::dtypeBytes(dt), count = bufferNumel(out[0]);
    const auto &shape = shapes[in[0]];
    const int64_t dim = ins.dim();
    const void *src = bufferData(in[0]);
    if (outerOf(shape, dim) != 1) {
      void *packed = tempBytes(workspace, count * n * eb);
      LOOM_RETURN_IF_ERROR(kernels->packBlocks(packed, src, shape, dim, n, eb));
      src = packed;
    }
    return comm->reduceScatter(src, dst, count, dt, ins.reduction(), axes);
  }
  case Opcode::AllToAll: {
    const DType dt = bufferDType(in[0]);
    const int64_t eb = program::dtypeBytes(dt);
    const auto &shape = shapes[in[0]];
    const int64_t dim = ins.dim(), dim2 = ins.dim2();
    const int64_t chunk = bufferNumel(in[0]) / n;
    std::vector<int64_t> chunkShape = shape;
    chunkShape[dim] /= n;
    const void *src = bufferData(in[0]);
    if (outerOf(shape, dim) != 1) {
      void *packed = tempBytes(workspace, chunk * n * eb);
      LOOM_RETURN_IF_ERROR(kernels->packBlocks(packed, src, shape, dim, n, eb));
      src = packed;
    }
    if (outerOf(chunkShape, dim2) == 1)
      return comm->allToAll(src, dst, chunk, dt, axes);
    void *received = tempBytes(workspace2, chunk * n * eb);
    LOOM_RETURN_IF_ERROR(comm->allToAll(src, received, chunk, dt, axes));
    return kernels->unpackBlocks(dst, received, chunkShape, dim2, n, eb);
  }
  case Opcode::Send:
  case Opcode::Recv: {
    std::vector<int64_t> c = comm->coords();
    c[axes[0]] = ins.peer();
    const int peer = comm->rankOf(c);
    if (op == Opcode::Send)
      return comm->send(bufferData(in[0]), bufferNumel(in[0]),
                        bufferDType(in[0]), peer, ins.tag());
    const int64_t waitStart = steadyNowNs();
    Status received = comm->recv(dst, bufferNumel(out[0]),
                                 bufferDType(out[0]), peer, ins.tag());
    recvWaitNs += steadyNowNs() - waitStart;
    return received;
  }
  default:
    break;
  }
  LOOM_ERROR("not a collective: " << program::opcodeName(op));
}

} // namespace loom
