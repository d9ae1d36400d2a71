//===- checkpoint.cpp - Parameters to and from safetensors -----*- C++ -*-===//
#include "runtime/core/checkpoint.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace loom {

namespace {

/// Copies the box at `offset` with extent `local` out of a row-major tensor
/// of shape `global` into dense `out`.
void copySlice(float *out, const float *full,
               const std::vector<int64_t> &global,
               const std::vector<int64_t> &offset,
               const std::vector<int64_t> &local) {
  const size_t rank = global.size();
  if (rank == 0) {
    out[0] = full[0];
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * global[d];
  const int64_t inner = local[rank - 1];
  int64_t runs = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    runs *= local[d];
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t src = 0;
    for (size_t d = 0; d < rank; ++d)
      src += (offset[d] + index[d]) * stride[d];
    std::memcpy(out + r * inner, full + src, inner * sizeof(float));
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < local[d])
        break;
      index[d] = 0;
    }
  }
}

/// Inverse of copySlice: writes dense `local` into the box at `offset` of a
/// row-major tensor of shape `global`.
void placeSlice(float *full, const float *local,
                const std::vector<int64_t> &global,
                const std::vector<int64_t> &offset,
                const std::vector<int64_t> &extent) {
  const size_t rank = global.size();
  if (rank == 0) {
    full[0] = local[0];
    return;
  }
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;)
    stride[d - 1] = stride[d] * global[d];
  const int64_t inner = extent[rank - 1];
  int64_t runs = 1;
  for (size_t d = 0; d + 1 < rank; ++d)
    runs *= extent[d];
  std::vector<int64_t> index(rank, 0);
  for (int64_t r = 0; r < runs; ++r) {
    int64_t dstOff = 0;
    for (size_t d = 0; d < rank; ++d)
      dstOff += (offset[d] + index[d]) * stride[d];
    std::memcpy(full + dstOff, local + r * inner, inner * sizeof(float));
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < extent[d])
        break;
      index[d] = 0;
    }
  }
}

std::string shapeStr(const std::vector<int64_t> &s) {
  return program::shapeString(s);
}

} // namespace

std::string expAvgName(const std::string &name) {
  return "optimizer.exp_avg." + name;
}

std::string expAvgSqName(const std::string &name) {
  return "optimizer.exp_avg_sq." + name;
}

ParamView momentView(const Executor &executor, const ParamView &p) {
  bool sharded = false;
  for (const auto &axes : p.momentSharding)
    sharded = sharded || !axes.empty();
  // The moments' shape, which a mixed-precision master shares.
  const int32_t like = p.mBuffer >= 0 ? p.mBuffer : p.masterBuffer;
  if (p.momentSharding.empty() || like < 0)
    return p;
  ParamView m = p;
  m.sharding = p.momentSharding;
  m.localShape = executor.bufferShape(static_cast<uint32_t>(like));
  m.sliceOffset.assign(m.localShape.size(), 0);
  if (sharded)
    for (size_t d = 0; d < m.sharding.size(); ++d)
      m.sliceOffset[d] =
          executor.communicator().blockIndex(m.sharding[d]) * m.localShape[d];
  return m;
}

namespace {

/// HF's GPT2LMHeadModel.save_pretrained writes the GPT2Model's tensors
/// under this prefix ("transformer.h.0.ln_1.weight"); GPT2Model files and
/// the hub's gpt2 weights have none.
constexpr const char *kHfLmModelPrefix = "transformer.";

/// The tensor holding parameter `name`: under its own name, else under HF's
/// GPT2LMHeadModel prefix; nullptr when neither is there.
const SafeTensor *findParamTensor(const SafetensorsFile &file,
                                  const std::string &name) {
  if (const SafeTensor *t = file.find(name))
    return t;
  return file.find(kHfLmModelPrefix + name);
}

/// Host vectors loadTensor reuses from tensor to tensor (fresh ones would
/// page-fault their memory in again for every tensor).
struct LoadScratch {
  std::vector<float> values; // the file's tensor, as fp32
  std::vector<float> local;  // this rank's slice of it
};

/// Copies this rank's slice of tensor `tensorName` (global shape of `p`) into
/// buffer `buffer`.
Status loadTensor(Executor &executor, const SafetensorsFile &file,
                  const std::string &path, const ParamView &p,
                  const std::string &tensorName, uint32_t buffer,
                  LoadScratch &scratch) {
  std::vector<float> &values = scratch.values;
  const SafeTensor *t = findParamTensor(file, tensorName);
  LOOM_CHECK(t, "checkpoint '" << path << "' has no tensor '" << tensorName
                               << "' (the program's parameter; nor '"
                               << kHfLmModelPrefix << tensorName
                               << "', as HF's GPT2LMHeadModel saves it); was "
                                  "it saved from a different model?");
  // The checkpoint's shape (HF's), or the program's own grouping of it; a
  // padded parameter's real rows only.
  LOOM_CHECK(t->shape == p.checkpointShape ||
                 (p.unpaddedRows == 0 && t->shape == p.globalShape),
             "checkpoint '" << path << "': tensor '" << tensorName
                            << "' has shape " << shapeStr(t->shape)
                            << " but the program expects "
                            << shapeStr(p.checkpointShape)
                            << (p.unpaddedRows > 0
                                    ? " (its real rows; the program pads "
                                      "them to " +
                                          shapeStr(p.globalShape) + ")"
                                    : std::string()));
  Status s = toFloat32(*t, values);
  if (!s.ok())
    return s.withContext("checkpoint '" + path + "', tensor '" + tensorName +
                         "'");
  // The padding rows follow the real ones (row-major): zeros.
  if (p.unpaddedRows > 0)
    values.resize(static_cast<size_t>(program::shapeNumel(p.globalShape)),
                  0.0f);
  // This rank's slice on the host, then into buffer memory; a bf16
  // parameter gets it rounded to nearest even (what the update's Cast of
  // the same fp32 master gives).
  std::vector<float> &local = scratch.local;
  local.resize(static_cast<size_t>(program::shapeNumel(p.localShape)));
  copySlice(local.data(), values.data(), p.globalShape, p.sliceOffset,
            p.localShape);
  if (executor.bufferDType(buffer) != program::DType::BF16)
    return executor.copyToBuffer(buffer, local.data(),
                                 local.size() * sizeof(float));
  std::vector<uint16_t> rounded(local.size());
  floatsToBF16(rounded.data(), local.data(),
               static_cast<int64_t>(local.size()));
  return executor.copyToBuffer(buffer, rounded.data(),
                               rounded.size() * sizeof(uint16_t));
}

/// HF files may hold GPT-2's LM head as its own tensor ("lm_head.weight",
/// or under the prefix); GPT-2, and Loom's model, tie it to wte, so one that
/// differs from wte.weight (a model fine-tuned with the head untied) cannot
/// be loaded without silently changing the model.
Status checkTiedLmHead(const SafetensorsFile &file, const std::string &path) {
  const SafeTensor *head = findParamTensor(file, "lm_head.weight");
  const SafeTensor *wte = findParamTensor(file, "wte.weight");
  if (!head || !wte)
    return Status::success();
  // Tied weights are one tensor saved twice: the same dtype, shape and
  // bytes.
  const bool tied = head->dtype == wte->dtype && head->shape == wte->shape &&
                    head->data == wte->data;
  LOOM_CHECK(tied,
             "checkpoint '"
                 << path << "': its LM head '" << head->name << "' ("
                 << dtypeName(head->dtype) << " " << shapeStr(head->shape)
                 << ") differs from '" << wte->name << "' ("
                 << dtypeName(wte->dtype) << " " << shapeStr(wte->shape) << ")"
                 << "; GPT-2 ties the two and so does Loom's model, so an "
                    "untied head cannot be loaded (drop '"
                 << head->name << "' to use wte as the head)");
  return Status::success();
}

} // namespace

Status loadCheckpoint(Executor &executor, const std::string &path,
                      int64_t *completedSteps,
                      std::map<std::string, std::string> *metadata) {
  if (completedSteps)
    *completedSteps = 0;
  SafetensorsFile file;
  LOOM_RETURN_IF_ERROR(readSafetensors(path, file));
  if (metadata)
    *metadata = file.metadata;
  LOOM_RETURN_IF_ERROR(checkTiedLmHead(file, path));
  LoadScratch scratch;
  for (const ParamView &p : executor.params()) {
    LOOM_RETURN_IF_ERROR(
        loadTensor(executor, file, path, p, p.name, p.buffer, scratch));
    // Mixed precision: the file's fp32 weights are the master (its own
    // block, sharded like the moments); the bf16 buffer got them rounded.
    if (p.masterBuffer >= 0)
      LOOM_RETURN_IF_ERROR(
          loadTensor(executor, file, path, momentView(executor, p), p.name,
                     static_cast<uint32_t>(p.masterBuffer), scratch));
  }
  if (!executor.isTraining())
    return Status::success();

  // Optimizer state: all of it or none (a weights-only checkpoint).
  const ParamView *with = nullptr, *without = nullptr;
  for (const ParamView &p : executor.params())
    (file.find(expAvgName(p.name)) ? with : without) = &p;
  if (!with) {
    for (const ParamView &p : executor.params())
      for (int32_t b : {p.mBuffer, p.vBuffer})
        if (b >= 0)
          LOOM_RETURN_IF_ERROR(executor.bufferMemory().fillZero(
              executor.bufferData(static_cast<uint32_t>(b)),
              static_cast<uint64_t>(
                  executor.bufferNumel(b) *
                  program::dtypeBytes(executor.bufferDType(b)))));
    return Status::success();
  }
  LOOM_CHECK(!without, "checkpoint '" << path << "' has optimizer state for '"
                                      << with->name << "' but not for '"
                                      << without->name << "' (no tensor '"
                                      << expAvgName(without->name)
                                      << "'); it is incomplete");
  for (const ParamView &param : executor.params()) {
    // The moments' own blocks (moment_sharding), which may differ from the
    // parameter's slice.
    const ParamView p = momentView(executor, param);
    if (p.mBuffer >= 0)
      LOOM_RETURN_IF_ERROR(
          loadTensor(executor, file, path, p, expAvgName(p.name),
                     static_cast<uint32_t>(p.mBuffer), scratch));
    if (p.vBuffer >= 0)
      LOOM_RETURN_IF_ERROR(
          loadTensor(executor, file, path, p, expAvgSqName(p.name),
                     static_cast<uint32_t>(p.vBuffer), scratch));
  }
  auto it = file.metadata.find("step");
  LOOM_CHECK(it != file.metadata.end(),
             "checkpoint '" << path
                            << "' has optimizer state but no \"step\" "
                               "metadata (the number of completed steps)");
  const std::string &text = it->second;
  errno = 0;
  char *end = nullptr;
  const long long steps = std::strtoll(text.c_str(), &end, 10);
  LOOM_CHECK(!text.empty() && end && *end == '\0' && errno == 0 && steps >= 0 &&
                 text.find_first_not_of("0123456789") == std::string::npos,
             "checkpoint '" << path << "': metadata \"step\" = '" << text
                            << "' is not a non-negative integer");
  if (completedSteps)
    *completedSteps = steps;
  return Status::success();
}

Status gatherParamTensor(const Executor &executor, const ParamView &p,
                         uint32_t buffer, std::vector<float> &global) {
  // This rank's block on the host (the buffer may be device memory).
  const int64_t localNumel = program::shapeNumel(p.localShape);
  std::vector<float> local(static_cast<size_t>(localNumel));
  if (executor.bufferDType(buffer) == program::DType::BF16) {
    // A bf16 buffer without master (an evaluation's weights) is saved
    // widened: checkpoints hold fp32.
    std::vector<uint16_t> narrow(local.size());
    LOOM_RETURN_IF_ERROR(executor.copyFromBuffer(
        buffer, narrow.data(), narrow.size() * sizeof(uint16_t)));
    bf16ToFloats(local.data(), narrow.data(), localNumel);
  } else {
    LOOM_RETURN_IF_ERROR(executor.copyFromBuffer(
        buffer, local.data(), local.size() * sizeof(float)));
  }
  if (!p.sharded()) {
    LOOM_CHECK(p.localShape == p.globalShape,
               "parameter '" << p.name << "' is sliced (local "
                             << shapeStr(p.localShape) << " of global "
                             << shapeStr(p.globalShape)
                             << ") without Param.sharding; its other parts "
                                "cannot be found");
    global = std::move(local);
    return Status::success();
  }
  Communicator &comm = executor.communicator();
  std::vector<uint32_t> axes; // the union, in mesh order
  for (uint32_t a = 0; a < comm.mesh().size(); ++a)
    for (const auto &dimAxes : p.sharding)
      for (uint32_t b : dimAxes)
        if (a == b)
          axes.push_back(a);
  const int64_t n = comm.groupSize(axes);
  std::vector<float> all(static_cast<size_t>(localNumel * n));
  LOOM_RETURN_IF_ERROR(comm.allGatherHost(local.data(), all.data(), localNumel,
                                          program::DType::F32, axes)
                           .withContext("gathering '" + p.name + "'"));
  global.assign(static_cast<size_t>(program::shapeNumel(p.globalShape)), 0.0f);
  for (int64_t m = 0; m < n; ++m) {
    const std::vector<int64_t> c = comm.coordsOf(comm.groupMember(axes, m));
    std::vector<int64_t> offset(p.localShape.size(), 0);
    for (size_t d = 0; d < p.sharding.size(); ++d) {
      int64_t block = 0;
      for (uint32_t a : p.sharding[d])
        block = block * comm.mesh()[a].size + c[a];
      offset[d] = block * p.localShape[d];
    }
    placeSlice(global.data(), all.data() + m * localNumel, p.globalShape,
               offset, p.localShape);
  }
  return Status::success();
}

namespace {

/// Tag of the messages that carry a pipeline stage's tensors to rank 0: the
/// largest tag every MPI must support (MPI_TAG_UB >= 32767), far above the
/// pipeline's own send/recv tags, whose messages are all received by the
/// time a checkpoint is saved.
constexpr int64_t kCheckpointTag = 32767;

/// The mesh axis named "pp" when `executor` runs a pipeline stage of a
/// mesh with more than one stage; -1 otherwise.
int pipelineAxis(const Executor &executor) {
  if (!executor.isPipelined())
    return -1;
  const Communicator &comm = executor.communicator();
  for (uint32_t a = 0; a < comm.mesh().size(); ++a)
    if (comm.mesh()[a].name == "pp" && comm.mesh()[a].size > 1)
      return static_cast<int>(a);
  return -1;
}

/// Whether this rank's coordinates are 0 on every axis but `skipAxis` (-1:
/// none): the rank that holds the gathered tensors of its pipeline stage.
bool leadsStage(const Communicator &comm, int skipAxis) {
  const std::vector<int64_t> c = comm.coords();
  for (size_t a = 0; a < c.size(); ++a)
    if (static_cast<int>(a) != skipAxis && c[a] != 0)
      return false;
  return true;
}

/// Sends the tensors of `file` to world rank `peer`: the byte count of a
/// manifest ("name<TAB>d0,d1,...\n" per tensor), the manifest, then each
/// tensor's F32 values, all tagged kCheckpointTag (MPI keeps their order).
Status sendStageTensors(Communicator &comm, const SafetensorsFile &file,
                        int peer) {
  std::string manifest;
  for (const SafeTensor &t : file.tensors) {
    manifest += t.name + "\t";
    for (size_t d = 0; d < t.shape.size(); ++d)
      manifest += (d ? "," : "") + std::to_string(t.shape[d]);
    manifest += "\n";
  }
  const int32_t length = static_cast<int32_t>(manifest.size());
  manifest.resize((manifest.size() + 3) / 4 * 4, '\n'); // whole I32 words
  LOOM_RETURN_IF_ERROR(
      comm.sendHost(&length, 1, program::DType::I32, peer, kCheckpointTag));
  LOOM_RETURN_IF_ERROR(
      comm.sendHost(manifest.data(), static_cast<int64_t>(manifest.size() / 4),
                    program::DType::I32, peer, kCheckpointTag));
  for (const SafeTensor &t : file.tensors)
    LOOM_RETURN_IF_ERROR(comm.sendHost(
        t.data.data(), t.numel(), program::DType::F32, peer, kCheckpointTag));
  return comm.flush();
}

/// Receives what sendStageTensors sent from world rank `peer` (the lead of
/// pipeline stage `stage`) and adds it to `file`. A tensor `file` already
/// holds is a parameter several stages share (GPT-2's tied wte on the first
/// and the last stage): the copies must be equal bit for bit, since every
/// stage applies the same summed gradient.
Status receiveStageTensors(Communicator &comm, int peer, int64_t stage,
                           const std::string &path, SafetensorsFile &file) {
  int32_t length = 0;
  LOOM_RETURN_IF_ERROR(
      comm.recvHost(&length, 1, program::DType::I32, peer, kCheckpointTag));
  LOOM_CHECK(length >= 0, "cannot save '" << path << "': pipeline stage "
                                          << stage
                                          << " sent a malformed manifest");
  std::string manifest((static_cast<size_t>(length) + 3) / 4 * 4, '\0');
  LOOM_RETURN_IF_ERROR(
      comm.recvHost(manifest.data(), static_cast<int64_t>(manifest.size() / 4),
                    program::DType::I32, peer, kCheckpointTag));
  manifest.resize(static_cast<size_t>(length));
  size_t pos = 0;
  while (pos < manifest.size()) {
    const size_t tab = manifest.find('\t', pos);
    const size_t eol = manifest.find('\n', pos);
    LOOM_CHECK(tab != std::string::npos && eol != std::string::npos &&
                   tab < eol,
               "cannot save '" << path << "': pipeline stage " << stage
                               << " sent a malformed manifest");
    SafeTensor t;
    t.name = manifest.substr(pos, tab - pos);
    std::string dims = manifest.substr(tab + 1, eol - tab - 1);
    for (size_t d = 0; d < dims.size();) {
      size_t comma = dims.find(',', d);
      if (comma == std::string::npos)
        comma = dims.size();
      t.shape.push_back(std::strtoll(dims.c_str() + d, nullptr, 10));
      d = comma + 1;
    }
    pos = eol + 1;
    t.data.resize(static_cast<size_t>(t.numel()) * sizeof(float));
    LOOM_RETURN_IF_ERROR(comm.recvHost(
        t.data.data(), t.numel(), program::DType::F32, peer, kCheckpointTag));
    if (const SafeTensor *held = file.find(t.name)) {
      LOOM_CHECK(held->shape == t.shape,
                 "cannot save '" << path << "': tensor '" << t.name
                                 << "' has shape " << shapeStr(t.shape)
                                 << " on pipeline stage " << stage << " but "
                                 << shapeStr(held->shape)
                                 << " on an earlier stage");
      if (held->data != t.data) {
        const float *a = reinterpret_cast<const float *>(held->data.data());
        const float *b = reinterpret_cast<const float *>(t.data.data());
        double worst = 0;
        for (int64_t i = 0; i < t.numel(); ++i)
          worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
        LOOM_ERROR("cannot save '"
                   << path << "': tensor '" << t.name
                   << "' is held by several pipeline stages and stage " << stage
                   << "'s copy differs from an earlier stage's (max "
                   << "|difference| " << worst
                   << "); the shared parameter's copies went out of step, "
                      "so the stages no longer train one model");
      }
      continue;
    }
    file.tensors.push_back(std::move(t));
  }
  return Status::success();
}

} // namespace

Status saveCheckpoint(const Executor &executor, const std::string &path,
                      int64_t completedSteps,
                      const std::map<std::string, std::string> &runMetadata) {
  Communicator &comm = executor.communicator();
  // Every rank of a stage gathers its stage's tensors (collectives within
  // the stage); the stage's lead holds them. Without a pipeline that is
  // rank 0, which writes; a pipeline stage's lead sends its tensors to rank
  // 0 (stage 0's lead), which writes them all.
  const int ppAxis = pipelineAxis(executor);
  const bool holder = leadsStage(comm, ppAxis);
  const bool writer = comm.rank() == 0;
  SafetensorsFile file;
  file.metadata["format"] = "pt";
  file.metadata["producer"] = "loom";
  const bool training = executor.isTraining();
  if (training)
    file.metadata["step"] = std::to_string(completedSteps);
  for (const auto &[key, value] : runMetadata) {
    LOOM_CHECK(!file.metadata.count(key), "cannot save '"
                                              << path << "': metadata \"" << key
                                              << "\" is the checkpoint's own");
    file.metadata[key] = value;
  }
  std::vector<float> global;
  auto add = [&](const ParamView &p, const std::string &name,
                 uint32_t buffer) -> Status {
    Status s = gatherParamTensor(executor, p, buffer, global);
    if (!s.ok())
      return s.withContext("cannot save '" + path + "'");
    // A padded parameter's real rows are the leading elements (row-major):
    // the checkpoint shape leaves the padding out.
    if (holder)
      file.addF32(name, p.checkpointShape.empty() ? p.globalShape
                                                  : p.checkpointShape,
                  global.data());
    return Status::success();
  };
  for (const ParamView &p : executor.params()) {
    // Mixed precision: the fp32 master, not its bf16 rounding.
    if (p.masterBuffer >= 0)
      LOOM_RETURN_IF_ERROR(add(momentView(executor, p), p.name,
                               static_cast<uint32_t>(p.masterBuffer)));
    else
      LOOM_RETURN_IF_ERROR(add(p, p.name, p.buffer));
  }
  if (training)
    for (const ParamView &param : executor.params()) {
      // Gathered by moment_sharding when the moments are sharded otherwise.
      const ParamView p = momentView(executor, param);
      if (p.mBuffer >= 0)
        LOOM_RETURN_IF_ERROR(
            add(p, expAvgName(p.name), static_cast<uint32_t>(p.mBuffer)));
      if (p.vBuffer >= 0)
        LOOM_RETURN_IF_ERROR(
            add(p, expAvgSqName(p.name), static_cast<uint32_t>(p.vBuffer)));
    }
  if (ppAxis >= 0 && holder) {
    const int64_t stages = comm.mesh()[ppAxis].size;
    if (writer) {
      std::vector<int64_t> c = comm.coords();
      for (int64_t s = 1; s < stages; ++s) {
        c[ppAxis] = s;
        LOOM_RETURN_IF_ERROR(
            receiveStageTensors(comm, comm.rankOf(c), s, path, file));
      }
    } else {
      LOOM_RETURN_IF_ERROR(sendStageTensors(comm, file, 0));
    }
  }
  if (!writer)
    return Status::success();
  return writeSafetensors(path, file);
}

} // namespace loom
