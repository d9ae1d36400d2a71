//===- verifier.cpp - Semantic checks of a program --------------*- C++ -*-===//
//
// What FlatBuffers cannot check (program.h lists it): buffers inside the
// arena, parameters and their shardings, the mesh, the special buffers
// (tokens, targets, loss, lr, step, grad_norm), pipeline chunks and
// actions, predictions, and every instruction list, each instruction by
// InstructionChecker (instruction_checker.cpp,
// instruction_checker_compute.cpp).
//
//===----------------------------------------------------------------------===//
#include "runtime/program/program.h"

#include "runtime/program/verifier_internal.h"

#include <limits>
#include <set>
#include <utility>

namespace loom::program {

using namespace detail;

//===----------------------------------------------------------------------===//
// Buffers
//===----------------------------------------------------------------------===//

namespace {

/// The largest rank the runtime accepts (GPT-2 needs 4).
constexpr size_t kMaxRank = 16;

Status checkBuffers(const Stage &stage, StageFacts &facts) {
  const uint32_t si = stage.index();
  const uint64_t arena = stage.arena_bytes();
  const auto *buffers = stage.buffers();
  const uint32_t n = buffers ? buffers->size() : 0;
  for (uint32_t j = 0; j < n; ++j) {
    const Buffer *b = buffers->Get(j);
    const std::string label = "stage " + std::to_string(si) + ", buffer #" +
                              std::to_string(j) + " '" + nameOf(b->name()) +
                              "'";
    const int64_t esize = dtypeBytes(b->dtype());
    LOOM_CHECK(esize > 0, label << ": unknown dtype "
                                << static_cast<int>(b->dtype())
                                << " (this runtime knows F32, I32, BF16)");
    std::vector<int64_t> shape = toVector(b->shape());
    LOOM_CHECK(shape.size() <= kMaxRank,
               label << ": rank " << shape.size() << " exceeds " << kMaxRank);
    int64_t numel = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      LOOM_CHECK(shape[d] > 0, label << ": dimension " << d << " of shape "
                                     << shapeString(shape)
                                     << " is not positive");
      LOOM_CHECK(numel <= std::numeric_limits<int64_t>::max() / 8 / shape[d],
                 label << ": shape " << shapeString(shape)
                       << " has too many elements");
      numel *= shape[d];
    }
    const uint64_t bytes = static_cast<uint64_t>(numel * esize);
    const uint64_t offset = b->offset();
    LOOM_CHECK(offset % kBufferAlignment == 0,
               label << ": offset " << offset << " is not aligned to "
                     << kBufferAlignment << " bytes");
    // A stash buffer's bytes are checked against the slot of each chunk
    // whose instructions name it (checkPipeline); here only that the
    // address space after the arena holds them.
    const uint64_t room = b->stash() ? std::numeric_limits<uint64_t>::max() -
                                           arena
                                     : arena;
    LOOM_CHECK(offset <= room && bytes <= room - offset,
               label << ": bytes [" << offset << ", " << offset << " + "
                     << bytes << ") of shape " << shapeString(shape) << " "
                     << dtypeLabel(b->dtype()) << " leave the arena of "
                     << arena << " bytes");
    facts.shapes.push_back(std::move(shape));
    facts.dtypes.push_back(b->dtype());
    // One address space for overlap checks, as the runtime sees it.
    const BufferRange range = bufferRange(stage, j);
    facts.offsets.push_back(range.begin);
    facts.bytes.push_back(range.bytes());
    facts.slotOffsets.push_back(b->stash() ? static_cast<int64_t>(offset) : -1);
  }
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Params, special buffers, stages
//===----------------------------------------------------------------------===//

Status checkParams(const Stage &stage, const StageFacts &facts, bool training) {
  const uint32_t si = stage.index();
  const auto *params = stage.params();
  if (!params)
    return Status::success();
  std::set<std::string> names;
  for (uint32_t p = 0; p < params->size(); ++p) {
    const Param *param = params->Get(p);
    const std::string name = nameOf(param->name());
    const std::string label = "stage " + std::to_string(si) + ", param #" +
                              std::to_string(p) + " '" + name + "'";
    LOOM_CHECK(!name.empty(), label << ": has no name");
    LOOM_CHECK(names.insert(name).second,
               label << ": the name appears twice in the parameter table");
    const uint32_t b = param->buffer();
    LOOM_CHECK(b < facts.shapes.size(),
               label << ": buffer " << b << " is out of range (the stage has "
                     << facts.shapes.size() << " buffers)");
    LOOM_CHECK(facts.dtypes[b] == DType::F32 || facts.dtypes[b] == DType::BF16,
               label << ": buffer " << b << " must be F32 or BF16, got "
                     << dtypeLabel(facts.dtypes[b]));
    const std::vector<int64_t> &local = facts.shapes[b];
    const std::vector<int64_t> global = toVector(param->global_shape());
    // A sharded parameter's offset follows from its sharding (checked by
    // checkSharding); slice_offset is ignored then.
    const bool sharded = param->sharding() && param->sharding()->size() > 0;
    std::vector<int64_t> offset = toVector(param->slice_offset());
    if (sharded)
      offset.assign(local.size(), 0);
    LOOM_CHECK(global.size() == local.size(),
               label << ": global shape " << shapeString(global) << " has rank "
                     << global.size() << " but the local buffer "
                     << shapeString(local) << " has rank " << local.size());
    LOOM_CHECK(offset.size() == local.size(),
               label << ": slice_offset " << shapeString(offset) << " has "
                     << offset.size() << " entries, expected " << local.size());
    int64_t gnumel = 1;
    for (size_t d = 0; d < global.size(); ++d) {
      LOOM_CHECK(global[d] > 0 &&
                     gnumel <= std::numeric_limits<int64_t>::max() / global[d],
                 label << ": global shape " << shapeString(global)
                       << " is invalid (dimensions must be positive)");
      gnumel *= global[d];
      LOOM_CHECK(offset[d] >= 0 && (sharded ? local[d] <= global[d]
                                            : offset[d] <= global[d] - local[d]),
                 label << ": slice at offset " << shapeString(offset)
                       << " of size " << shapeString(local)
                       << " leaves the global shape " << shapeString(global)
                       << " in dimension " << d);
    }
    // A checkpoint shape regroups the same elements.
    const std::vector<int64_t> checkpoint =
        toVector(param->checkpoint_shape());
    if (!checkpoint.empty()) {
      int64_t cnumel = 1;
      for (int64_t d : checkpoint) {
        LOOM_CHECK(d > 0 && cnumel <= std::numeric_limits<int64_t>::max() / d,
                   label << ": checkpoint shape " << shapeString(checkpoint)
                         << " is invalid (dimensions must be positive)");
        cnumel *= d;
      }
      LOOM_CHECK(cnumel == gnumel,
                 label << ": checkpoint shape " << shapeString(checkpoint)
                       << " has " << cnumel << " elements but the global shape "
                       << shapeString(global) << " has " << gnumel);
    }
    // A padded parameter: its real rows, then padding (dimension 0 only).
    const int64_t unpadded = param->unpadded_rows();
    LOOM_CHECK(unpadded >= 0 && unpadded <= (global.empty() ? 0 : global[0]),
               label << ": unpadded_rows = " << unpadded
                     << " must be in [0, " << (global.empty() ? 0 : global[0])
                     << "] (the real rows of dimension 0 of the global shape "
                     << shapeString(global) << "; 0: not padded)");
    LOOM_CHECK(unpadded == 0 || checkpoint.empty(),
               label << ": has both unpadded_rows and checkpoint_shape; a "
                        "padded parameter is saved with its real rows, not "
                        "regrouped");
    // ZeRO: grad_sharding / moment_sharding (when present) give the
    // gradient / moments the global shape divided per dimension by the
    // product of the sizes of that dimension's axes; else they have the
    // parameter's local shape.
    auto extraShape =
        [&](const flatbuffers::Vector<flatbuffers::Offset<DimSharding>> *sh,
            const char *field, std::vector<int64_t> &want) -> Status {
      want = local;
      if (!sh || sh->size() == 0)
        return Status::success();
      LOOM_CHECK(!facts.mesh.empty(),
                 label << ": has " << field << " but Program.mesh is empty");
      LOOM_CHECK(sh->size() == global.size(),
                 label << ": " << field << " has " << sh->size()
                       << " entries, expected one per dimension ("
                       << global.size() << ")");
      std::set<uint32_t> used;
      for (uint32_t d = 0; d < sh->size(); ++d) {
        const DimSharding *ds = sh->Get(d);
        int64_t blocks = 1;
        for (uint32_t a : toVector(ds ? ds->axes() : nullptr)) {
          LOOM_CHECK(a < facts.mesh.size(),
                     label << ": " << field << " of dimension " << d
                           << " names axis " << a << ", but the mesh has "
                           << facts.mesh.size() << " axes");
          LOOM_CHECK(used.insert(a).second,
                     label << ": " << field << ": mesh axis " << a
                           << " shards more than one dimension (or twice)");
          blocks *= facts.mesh[a];
        }
        LOOM_CHECK(global[d] % blocks == 0,
                   label << ": " << field << ": dimension " << d
                         << " of the global shape " << shapeString(global)
                         << " is not divisible into " << blocks << " blocks");
        want[d] = global[d] / blocks;
      }
      return Status::success();
    };
    std::vector<int64_t> gradShape, momentShape;
    LOOM_RETURN_IF_ERROR(
        extraShape(param->grad_sharding(), "grad_sharding", gradShape));
    LOOM_RETURN_IF_ERROR(
        extraShape(param->moment_sharding(), "moment_sharding", momentShape));
    // Training buffers: the gradient accumulator and the AdamW moments have
    // those shapes and share no bytes with the parameter or each other (the
    // update reads the gradient while writing the rest). The moments and a
    // mixed-precision master are F32; the gradient F32 or BF16 (bf16
    // gradients, or fp32 accumulation under bf16 weights).
    struct Extra {
      int32_t index;
      const char *what;
      const std::vector<int64_t> *shape;
      const char *whose;
      bool bf16Allowed;
    };
    const bool gradSharded =
        param->grad_sharding() && param->grad_sharding()->size() > 0;
    const bool momentSharded =
        param->moment_sharding() && param->moment_sharding()->size() > 0;
    const char *momentWhose =
        momentSharded ? "moment_sharding's block" : "the parameter's";
    const Extra extra[] = {
        {param->grad_buffer(), "grad_buffer", &gradShape,
         gradSharded ? "grad_sharding's block" : "the parameter's", true},
        {param->m_buffer(), "m_buffer", &momentShape, momentWhose, false},
        {param->v_buffer(), "v_buffer", &momentShape, momentWhose, false},
        {param->master_buffer(), "master_buffer", &momentShape, momentWhose,
         false}};
    std::vector<uint32_t> owned = {b};
    for (const auto &[index, what, want, whose, bf16Allowed] : extra) {
      if (index == -1)
        continue;
      LOOM_CHECK(index >= 0 && static_cast<size_t>(index) < facts.shapes.size(),
                 label << ": " << what << " " << index
                       << " is out of range (the stage has "
                       << facts.shapes.size() << " buffers; -1 means none)");
      const DType t = facts.dtypes[index];
      LOOM_CHECK((t == DType::F32 || (bf16Allowed && t == DType::BF16)) &&
                     facts.shapes[index] == *want,
                 label << ": " << what << " " << index << " is "
                       << shapeString(facts.shapes[index]) << " "
                       << dtypeLabel(t) << ", expected " << whose << " "
                       << shapeString(*want)
                       << (bf16Allowed ? " F32 or BF16" : " F32"));
      for (uint32_t other : owned)
        LOOM_CHECK(facts.offsets[index] >=
                           facts.offsets[other] + facts.bytes[other] ||
                       facts.offsets[other] >=
                           facts.offsets[index] + facts.bytes[index],
                   label << ": " << what << " " << index << " overlaps buffer "
                         << other << " of the same parameter");
      owned.push_back(static_cast<uint32_t>(index));
    }
    // The model state is held through the step, never in a stash slot
    // (bound only while a chunk's action runs).
    for (uint32_t held : owned)
      LOOM_CHECK(facts.slotOffsets[held] < 0,
                 label << ": buffer " << held
                       << " is in a stash slot; a parameter's buffers must "
                          "be in the arena");
    if (training)
      LOOM_CHECK(param->grad_buffer() >= 0 && param->m_buffer() >= 0 &&
                     param->v_buffer() >= 0,
                 label << ": a training program (update_instructions is not "
                          "empty) needs grad_buffer, m_buffer and v_buffer "
                          "for every parameter");
    // Mixed precision: the master holds the fp32 weights of a bf16
    // parameter. A bf16 parameter a training program updates without one
    // would lose every update smaller than bf16's spacing.
    LOOM_CHECK(param->master_buffer() < 0 || facts.dtypes[b] == DType::BF16,
               label << ": has master_buffer " << param->master_buffer()
                     << " but its buffer " << b << " is "
                     << dtypeLabel(facts.dtypes[b])
                     << "; fp32 master weights belong to a BF16 parameter");
    LOOM_CHECK(!training || facts.dtypes[b] != DType::BF16 ||
                   param->master_buffer() >= 0,
               label << ": buffer " << b
                     << " is BF16 but the training program gives it no "
                        "master_buffer (the fp32 master weights AdamW "
                        "updates); compile with --precision bf16, which "
                        "adds them");
    const auto kind = param->init();
    LOOM_CHECK(kind == InitKind::Normal || kind == InitKind::Zeros ||
                   kind == InitKind::Ones,
               label << ": unknown init kind " << static_cast<int>(kind));
    const double std = param->init_std();
    LOOM_CHECK(kind != InitKind::Normal || (std >= 0.0 && std < 1e6),
               label << ": init_std " << std << " is not a valid standard "
                     << "deviation");
  }
  return Status::success();
}

/// Param.sharding: one entry per dimension, axes in range and distinct over
/// the whole parameter, and local size x blocks = global size.
Status checkSharding(const Stage &stage, const StageFacts &facts) {
  const auto *params = stage.params();
  if (!params)
    return Status::success();
  for (uint32_t p = 0; p < params->size(); ++p) {
    const Param *param = params->Get(p);
    const auto *sharding = param->sharding();
    if (!sharding || sharding->size() == 0)
      continue;
    const std::string label = "stage " + std::to_string(stage.index()) +
                              ", param #" + std::to_string(p) + " '" +
                              nameOf(param->name()) + "'";
    LOOM_CHECK(!facts.mesh.empty(),
               label << ": is sharded but Program.mesh is empty");
    const std::vector<int64_t> &local = facts.shapes[param->buffer()];
    const std::vector<int64_t> global = toVector(param->global_shape());
    LOOM_CHECK(sharding->size() == local.size(),
               label << ": sharding has " << sharding->size()
                     << " entries, expected one per dimension ("
                     << local.size() << ")");
    std::set<uint32_t> used;
    for (uint32_t d = 0; d < sharding->size(); ++d) {
      const DimSharding *ds = sharding->Get(d);
      int64_t blocks = 1;
      for (uint32_t a : toVector(ds ? ds->axes() : nullptr)) {
        LOOM_CHECK(a < facts.mesh.size(),
                   label << ": sharding of dimension " << d << " names axis "
                         << a << ", but the mesh has " << facts.mesh.size()
                         << " axes");
        LOOM_CHECK(used.insert(a).second,
                   label << ": mesh axis " << a
                         << " shards more than one dimension (or twice)");
        blocks *= facts.mesh[a];
      }
      LOOM_CHECK(local[d] * blocks == global[d],
                 label << ": dimension " << d << " has local size "
                       << local[d] << " x " << blocks
                       << " blocks, but the global size is " << global[d]);
    }
  }
  return Status::success();
}

Status checkMesh(const Program &program) {
  if (!program.mesh())
    return Status::success();
  std::set<std::string> names;
  int64_t devices = 1;
  for (uint32_t a = 0; a < program.mesh()->size(); ++a) {
    const MeshAxis *axis = program.mesh()->Get(a);
    const std::string name = nameOf(axis->name());
    LOOM_CHECK(!name.empty(), "mesh axis #" << a << " has no name");
    LOOM_CHECK(names.insert(name).second,
               "mesh axis name '" << name << "' appears twice");
    LOOM_CHECK(axis->size() >= 1 && axis->size() <= (1 << 20),
               "mesh axis '" << name << "' has size " << axis->size());
    devices *= axis->size();
    LOOM_CHECK(devices <= (1 << 24), "the mesh has too many devices");
  }
  LOOM_CHECK(program.mesh()->size() <= 32, "the mesh has more than 32 axes");
  return Status::success();
}

Status checkSpecialBuffer(const Stage &stage, const StageFacts &facts,
                          int32_t index, const char *what, DType want) {
  if (index == -1)
    return Status::success();
  const uint32_t si = stage.index();
  LOOM_CHECK(index >= 0 && static_cast<size_t>(index) < facts.shapes.size(),
             "stage " << si << ": " << what << " buffer " << index
                      << " is out of range (the stage has "
                      << facts.shapes.size() << " buffers; -1 means none)");
  LOOM_CHECK(facts.dtypes[index] == want,
             "stage " << si << ": " << what << " buffer " << index
                      << " must be " << dtypeLabel(want) << ", got "
                      << dtypeLabel(facts.dtypes[index]));
  LOOM_CHECK(facts.slotOffsets[index] < 0,
             "stage " << si << ": " << what << " buffer " << index
                      << " is in a stash slot; the runtime sets it between "
                         "actions, so it must be in the arena");
  return Status::success();
}

/// A stash buffer (Buffer.stash) named by a list of `chunk` (nullptr: the
/// stage's instructions or update_instructions, which run with no slot)
/// lies inside that chunk's stash slot.
Status checkStashUse(const Stage &stage, const StageFacts &facts, uint32_t b,
                     const PipelineChunk *chunk, const std::string &where) {
  if (facts.slotOffsets[b] < 0)
    return Status::success();
  const std::string label = where + ": buffer #" + std::to_string(b) + " '" +
                            nameOf(stage.buffers()->Get(b)->name()) + "'";
  LOOM_CHECK(chunk, label << " is in a stash slot, but only a pipeline "
                             "chunk's forward and backward run with one");
  const uint64_t offset = static_cast<uint64_t>(facts.slotOffsets[b]);
  LOOM_CHECK(offset <= chunk->stash_bytes() &&
                 facts.bytes[b] <= chunk->stash_bytes() - offset,
             label << ": bytes [" << offset << ", " << offset << " + "
                   << facts.bytes[b] << ") leave the chunk's stash slot of "
                   << chunk->stash_bytes() << " bytes");
  return Status::success();
}

/// Checks one instruction list ("instruction" or "update instruction"), of
/// pipeline chunk `chunk` or (nullptr) of the stage.
Status checkInstructionList(
    const Stage &stage, const StageFacts &facts,
    const flatbuffers::Vector<flatbuffers::Offset<Instruction>> *list,
    bool update, const PipelineChunk *chunk = nullptr) {
  if (!list)
    return Status::success();
  const uint32_t si = stage.index();
  const char *kind = update ? "update instruction" : "instruction";
  for (uint32_t i = 0; i < list->size(); ++i) {
    const Instruction *ins = list->Get(i);
    const Opcode op = ins->opcode();
    std::string prefix = "stage " + std::to_string(si) + ", " + kind + " #" +
                         std::to_string(i) + " '" + nameOf(ins->name()) +
                         "' (" + opcodeName(op) + ")";
    LOOM_CHECK(update || !(op == Opcode::SumSquares || op == Opcode::ClipCoef ||
                           op == Opcode::AdamW),
               prefix << ": the optimizer runs once per step, after all "
                         "micro-batches; it belongs in update_instructions");
    // Only a training step's micro-batch list, or a pipeline chunk's
    // backward, runs once per micro-batch.
    LOOM_CHECK(!ins->last_microbatch_only() ||
                   (!update && (!chunk || list == chunk->backward()) &&
                    stage.update_instructions() &&
                    stage.update_instructions()->size() > 0),
               prefix << ": last_microbatch_only belongs in the instructions "
                         "of a training stage or a pipeline chunk's backward "
                         "(an update runs once per step, a forward in "
                         "evaluations too)");
    LOOM_RETURN_IF_ERROR(InstructionChecker(facts, *ins, prefix).check());
    for (const auto *operands : {ins->inputs(), ins->outputs(), ins->scratch()})
      if (operands)
        for (uint32_t b : *operands)
          LOOM_RETURN_IF_ERROR(checkStashUse(stage, facts, b, chunk, prefix));
  }
  return Status::success();
}

/// A pipeline stage: its chunks' instruction lists, stashes and loss, and
/// actions that run every chunk's forward and backward on every
/// micro-batch once, the forward first. A stage without update_instructions
/// is an evaluation's (forward-only): no backward instructions, no stash,
/// and only forward actions, each chunk and micro-batch once.
Status checkPipeline(const Stage &stage, const StageFacts &facts) {
  const Pipeline *pipe = stage.pipeline();
  if (!pipe)
    return Status::success();
  const uint32_t si = stage.index();
  const uint32_t nb = static_cast<uint32_t>(facts.shapes.size());
  const bool forwardOnly =
      !stage.update_instructions() || stage.update_instructions()->size() == 0;
  LOOM_CHECK(pipe->predicted_stash_peak_bytes() >= -1,
             "stage " << si << ": predicted_stash_peak_bytes "
                      << pipe->predicted_stash_peak_bytes()
                      << " is negative (-1: unknown)");
  const auto *chunks = pipe->chunks();
  LOOM_CHECK(chunks && chunks->size() > 0,
             "stage " << si << ": the pipeline has no chunks");
  for (uint32_t c = 0; c < chunks->size(); ++c) {
    const PipelineChunk *chunk = chunks->Get(c);
    const std::string label =
        "stage " + std::to_string(si) + ", chunk #" + std::to_string(c);
    LOOM_RETURN_IF_ERROR(
        checkInstructionList(stage, facts, chunk->forward(), false, chunk));
    LOOM_RETURN_IF_ERROR(
        checkInstructionList(stage, facts, chunk->backward(), false, chunk));
    const std::vector<uint32_t> out = toVector(chunk->stash_out()),
                                in = toVector(chunk->stash_in());
    LOOM_CHECK(!forwardOnly ||
                   ((!chunk->backward() || chunk->backward()->size() == 0) &&
                    out.empty() && chunk->stash_bytes() == 0),
               label << ": a pipeline stage without update_instructions is "
                        "an evaluation's, but the chunk has backward "
                        "instructions or stashes activations");
    LOOM_CHECK(out.size() == in.size(),
               label << ": the forward keeps " << out.size()
                     << " stashed buffers but the backward reads "
                     << in.size());
    // The forward's and the backward's name of each kept value: the same
    // bytes of the slot.
    for (size_t k = 0; k < out.size(); ++k) {
      LOOM_CHECK(out[k] < nb && in[k] < nb,
                 label << ": stash buffer index out of range (" << nb
                       << " buffers)");
      for (uint32_t b : {out[k], in[k]}) {
        LOOM_CHECK(facts.slotOffsets[b] >= 0,
                   label << ": stash #" << k << ", buffer #" << b << " '"
                         << nameOf(stage.buffers()->Get(b)->name())
                         << "' is in the arena, not in the stash slot "
                            "(Buffer.stash)");
        LOOM_RETURN_IF_ERROR(checkStashUse(
            stage, facts, b, chunk, label + ", stash #" + std::to_string(k)));
      }
      LOOM_CHECK(facts.shapes[out[k]] == facts.shapes[in[k]] &&
                     facts.dtypes[out[k]] == facts.dtypes[in[k]] &&
                     facts.slotOffsets[out[k]] == facts.slotOffsets[in[k]],
                 label << ": stash #" << k << " is kept as "
                       << shapeString(facts.shapes[out[k]]) << " "
                       << dtypeLabel(facts.dtypes[out[k]]) << " at slot offset "
                       << facts.slotOffsets[out[k]] << " but read as "
                       << shapeString(facts.shapes[in[k]]) << " "
                       << dtypeLabel(facts.dtypes[in[k]]) << " at "
                       << facts.slotOffsets[in[k]]);
    }
    const int32_t loss = chunk->loss();
    LOOM_CHECK(loss < 0 || (static_cast<uint32_t>(loss) < nb &&
                            shapeNumel(facts.shapes[loss]) == 1 &&
                            facts.dtypes[loss] == DType::F32),
               label << ": loss buffer " << loss
                     << " must be an F32 scalar");
  }
  const int64_t m = stage.microbatches();
  std::set<std::pair<uint32_t, uint32_t>> forward, backward;
  if (pipe->actions())
    for (const PipelineAction *a : *pipe->actions()) {
      const std::string name = std::string(a->backward() ? "B" : "F") +
                               std::to_string(a->microbatch()) + "." +
                               std::to_string(a->chunk());
      LOOM_CHECK(a->chunk() < chunks->size() && a->microbatch() < m,
                 "stage " << si << ": action " << name
                          << " names a chunk or micro-batch out of range");
      std::pair<uint32_t, uint32_t> key{a->chunk(), a->microbatch()};
      LOOM_CHECK(!forwardOnly || !a->backward(),
                 "stage " << si << ": action " << name
                          << " is a backward, but the stage has no "
                             "update_instructions (an evaluation's pipeline "
                             "runs forwards only)");
      LOOM_CHECK(a->backward() ? forward.count(key) && backward.insert(key).second
                               : forward.insert(key).second,
                 "stage " << si << ": action " << name
                          << " repeats or precedes its forward");
    }
  const std::set<std::pair<uint32_t, uint32_t>> &complete =
      forwardOnly ? forward : backward;
  LOOM_CHECK(static_cast<int64_t>(complete.size()) ==
                 static_cast<int64_t>(chunks->size()) * m,
             "stage " << si << ": the actions run " << complete.size()
                      << (forwardOnly ? " forwards" : " backwards") << " but "
                      << chunks->size() << " chunks x " << m
                      << " micro-batches need one each");
  return Status::success();
}

/// The compiler's predictions, when present: byte counts, never negative.
Status checkPredictions(const Stage &stage) {
  const Predictions *p = stage.predictions();
  if (!p)
    return Status::success();
  const uint32_t si = stage.index();
  LOOM_CHECK(p->model_state_bytes() >= 0,
             "stage " << si << ": predicted model_state_bytes "
                      << p->model_state_bytes() << " is negative");
  const SentBytes *sent = p->sent_bytes_per_step();
  LOOM_CHECK(sent,
             "stage " << si << ": predictions have no sent_bytes_per_step");
  const std::pair<const char *, int64_t> kinds[] = {
      {"all_reduce", sent->all_reduce()},
      {"all_gather", sent->all_gather()},
      {"reduce_scatter", sent->reduce_scatter()},
      {"all_to_all", sent->all_to_all()},
      {"send", sent->send()}};
  for (const auto &[kind, bytes] : kinds)
    LOOM_CHECK(bytes >= 0, "stage " << si << ": predicted sent_bytes_per_step."
                                    << kind << " " << bytes << " is negative");
  return Status::success();
}

Status checkStage(const Stage &stage, const ModelInfo &model,
                  const Program &program) {
  StageFacts facts;
  facts.stageIndex = stage.index();
  int64_t dpSize = 1;
  if (program.mesh())
    for (const MeshAxis *a : *program.mesh()) {
      facts.mesh.push_back(a->size());
      if (nameOf(a->name()) == "dp")
        dpSize = a->size();
    }
  const uint32_t si = stage.index();
  const bool training =
      stage.update_instructions() && stage.update_instructions()->size() > 0;
  LOOM_RETURN_IF_ERROR(checkBuffers(stage, facts));
  LOOM_RETURN_IF_ERROR(checkParams(stage, facts, training));
  LOOM_RETURN_IF_ERROR(checkSharding(stage, facts));
  LOOM_CHECK(!stage.pipeline() || !stage.instructions() ||
                 stage.instructions()->size() == 0,
             "stage " << si << ": a pipeline stage runs its chunks' "
                             "instructions, so Stage.instructions must be "
                             "empty");
  LOOM_RETURN_IF_ERROR(
      checkInstructionList(stage, facts, stage.instructions(), false));
  LOOM_RETURN_IF_ERROR(
      checkInstructionList(stage, facts, stage.update_instructions(), true));
  LOOM_RETURN_IF_ERROR(checkPipeline(stage, facts));
  // After the instructions, whose messages are more specific.
  LOOM_RETURN_IF_ERROR(
      checkSpecialBuffer(stage, facts, stage.tokens(), "tokens", DType::I32));
  LOOM_RETURN_IF_ERROR(
      checkSpecialBuffer(stage, facts, stage.targets(), "targets", DType::I32));
  LOOM_RETURN_IF_ERROR(
      checkSpecialBuffer(stage, facts, stage.loss(), "loss", DType::F32));
  if (stage.tokens() >= 0 && stage.targets() >= 0)
    LOOM_CHECK(facts.shapes[stage.tokens()] == facts.shapes[stage.targets()],
               "stage " << si << ": tokens shape "
                        << shapeString(facts.shapes[stage.tokens()])
                        << " differs from targets shape "
                        << shapeString(facts.shapes[stage.targets()]));
  // Scalars: the loss, and the training step's lr / step / grad_norm.
  const std::pair<int32_t, const char *> scalars[] = {
      {stage.loss(), "loss"},
      {stage.lr(), "lr"},
      {stage.step(), "step"},
      {stage.grad_norm(), "grad_norm"}};
  for (const auto &[index, what] : scalars) {
    if (index == stage.loss()) {
      if (index >= 0)
        LOOM_CHECK(shapeNumel(facts.shapes[index]) == 1,
                   "stage " << si << ": loss buffer " << index
                            << " must be a scalar, got shape "
                            << shapeString(facts.shapes[index]));
      continue;
    }
    LOOM_RETURN_IF_ERROR(
        checkSpecialBuffer(stage, facts, index, what, DType::F32));
    if (index >= 0)
      LOOM_CHECK(shapeNumel(facts.shapes[index]) == 1,
                 "stage " << si << ": " << what << " buffer " << index
                          << " must be a scalar, got shape "
                          << shapeString(facts.shapes[index]));
  }
  // Micro-batches split the global batch evenly.
  const int64_t mb = stage.microbatches();
  LOOM_CHECK(mb >= 1 && model.batch() % mb == 0,
             "stage " << si << ": microbatches = " << mb
                      << " must be >= 1 and divide the batch of "
                      << model.batch() << " rows");
  LOOM_CHECK(model.batch() % (mb * dpSize) == 0,
             "stage " << si << ": microbatches = " << mb << " times the dp "
                      << "axis size " << dpSize << " must divide the batch of "
                      << model.batch() << " rows");
  {
    const int64_t want = model.batch() / dpSize / mb * model.seq();
    for (const auto &[index, what] :
         {std::pair<int32_t, const char *>{stage.tokens(), "tokens"},
          {stage.targets(), "targets"}})
      LOOM_CHECK(index < 0 || shapeNumel(facts.shapes[index]) == want,
                 "stage " << si << ": the " << what << " buffer "
                          << shapeString(facts.shapes[index])
                          << " does not hold one micro-batch of batch / "
                             "microbatches"
                          << (dpSize > 1 ? " / dp" : "") << " x seq = "
                          << model.batch() << " / " << mb
                          << (dpSize > 1 ? " / " + std::to_string(dpSize)
                                         : std::string())
                          << " x " << model.seq() << " = " << want
                          << " tokens");
  }
  LOOM_RETURN_IF_ERROR(checkPredictions(stage));
  if (training) {
    LOOM_CHECK(stage.lr() >= 0 && stage.step() >= 0,
               "stage " << si
                        << ": a training program (update_instructions "
                           "is not empty) needs the lr and step scalar "
                           "buffers the runtime sets each step");
  }
  return Status::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry point
//===----------------------------------------------------------------------===//

Status verifyProgram(const Program &program) {
  LOOM_CHECK(program.format_version() == 0 ||
                 program.format_version() == kFormatVersion,
             "program declares format_version "
                 << program.format_version() << " but this runtime reads "
                 << kFormatVersion << "; recompile the program");
  const ModelInfo *model = program.model();
  LOOM_CHECK(model, "program has no model info (n_layer, batch, ...)");
  const std::pair<const char *, int64_t> fields[] = {
      {"n_layer", model->n_layer()},
      {"n_head", model->n_head()},
      {"n_embd", model->n_embd()},
      {"vocab_size", model->vocab_size()},
      {"n_positions", model->n_positions()},
      {"batch", model->batch()},
      {"seq", model->seq()}};
  for (const auto &[name, value] : fields)
    LOOM_CHECK(value > 0, "program model info: " << name << " = " << value
                                                 << " must be positive");
  LOOM_RETURN_IF_ERROR(checkMesh(program));
  const auto *stages = program.stages();
  LOOM_CHECK(stages && stages->size() > 0, "program has no stages");
  std::set<uint32_t> seen;
  for (uint32_t s = 0; s < stages->size(); ++s) {
    const Stage *stage = stages->Get(s);
    LOOM_CHECK(seen.insert(stage->index()).second,
               "stage #" << s << " repeats stage index " << stage->index());
    LOOM_RETURN_IF_ERROR(checkStage(*stage, *model, program));
  }
  return Status::success();
}

} // namespace loom::program
