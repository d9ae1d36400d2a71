//===- checkpoint.cpp - Parameters to and from safetensors ------*- C++ -*-===//
#include "runtime/core/checkpoint.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/safetensors.h"
#include "runtime/core/tensor_box.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

namespace loom {

namespace {

/// Writes dense `local` into the box at `offset` with extent `extent` of a
/// row-major tensor of shape `global`.
void placeSlice(float *full, const float *local,
                const std::vector<int64_t> &global,
                const std::vector<int64_t> &offset,
                const std::vector<int64_t> &extent) {
  forEachBoxRun(global, offset, extent,
                [&](int64_t at, int64_t box, int64_t length) {
                  std::memcpy(full + at, local + box, length * sizeof(float));
                });
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
const TensorEntry *findParamTensor(const SafetensorsReader &file,
                                   const std::string &name) {
  if (const TensorEntry *t = file.find(name))
    return t;
  return file.find(kHfLmModelPrefix + name);
}

/// Host vectors loadTensor reuses from tensor to tensor (fresh ones would
/// page-fault their memory in again for every tensor).
struct LoadScratch {
  std::vector<uint8_t> raw;      // a chunk of the file's bytes
  std::vector<float> local;      // this rank's slice, as fp32
  std::vector<uint16_t> rounded; // the slice rounded to bf16
};

/// Copies this rank's slice of tensor `tensorName` (global shape of `p`) into
/// buffer `buffer`.
Status loadTensor(Executor &executor, const SafetensorsReader &file,
                  const ParamView &p, const std::string &tensorName,
                  uint32_t buffer, LoadScratch &scratch) {
  const std::string &path = file.path();
  const TensorEntry *t = findParamTensor(file, tensorName);
  LOOM_CHECK(t, "checkpoint '" << path << "' has no tensor '" << tensorName
                               << "' (the program's parameter; nor '"
                               << kHfLmModelPrefix << tensorName
                               << "', as HF's GPT2LMHeadModel saves it); was "
                                  "it saved from a different model?");
  // The checkpoint's shape (HF's), or the program's own grouping of it; a
  // padded parameter's real rows only.
  LOOM_CHECK(t->shape == p.checkpointShape ||
                 (p.unpaddedRows == 0 && t->shape == p.globalShape),
             "checkpoint '"
                 << path << "': tensor '" << tensorName << "' has shape "
                 << shapeStr(t->shape) << " but the program expects "
                 << shapeStr(p.checkpointShape)
                 << (p.unpaddedRows > 0 ? " (its real rows; the program pads "
                                          "them to " +
                                              shapeStr(p.globalShape) + ")"
                                        : std::string()));
  // This rank's slice on the host, then into buffer memory; a bf16
  // parameter gets it rounded to nearest even (what the update's Cast of
  // the same fp32 master gives).
  std::vector<float> &local = scratch.local;
  local.resize(static_cast<size_t>(program::shapeNumel(p.localShape)));
  Status s = file.readFloat32Box(*t, p.globalShape, p.sliceOffset, p.localShape,
                                 local.data(), scratch.raw);
  if (!s.ok())
    return s.withContext("checkpoint '" + path + "', tensor '" + tensorName +
                         "'");
  if (executor.bufferDType(buffer) != program::DType::BF16)
    return executor.copyToBuffer(buffer, local.data(),
                                 local.size() * sizeof(float));
  std::vector<uint16_t> &rounded = scratch.rounded;
  rounded.resize(local.size());
  floatsToBF16(rounded.data(), local.data(),
               static_cast<int64_t>(local.size()));
  return executor.copyToBuffer(buffer, rounded.data(),
                               rounded.size() * sizeof(uint16_t));
}

/// Whether tensors `a` and `b` of `file` hold the same bytes (read a chunk
/// at a time).
Status sameBytes(const SafetensorsReader &file, const TensorEntry &a,
                 const TensorEntry &b, bool &same) {
  same = a.bytes() == b.bytes();
  constexpr uint64_t kChunk = uint64_t{16} << 20;
  std::vector<uint8_t> x, y;
  for (uint64_t at = 0; same && at < a.bytes(); at += kChunk) {
    const uint64_t n = std::min(kChunk, a.bytes() - at);
    x.resize(n);
    y.resize(n);
    LOOM_RETURN_IF_ERROR(file.read(a, at, n, x.data()));
    LOOM_RETURN_IF_ERROR(file.read(b, at, n, y.data()));
    same = x == y;
  }
  return Status::success();
}

/// HF files may hold GPT-2's LM head as its own tensor ("lm_head.weight",
/// or under the prefix); GPT-2, and Loom's model, tie it to wte, so one that
/// differs from wte.weight (a model fine-tuned with the head untied) cannot
/// be loaded without silently changing the model.
Status checkTiedLmHead(const SafetensorsReader &file) {
  const TensorEntry *head = findParamTensor(file, "lm_head.weight");
  const TensorEntry *wte = findParamTensor(file, "wte.weight");
  if (!head || !wte)
    return Status::success();
  // Tied weights are one tensor saved twice: the same dtype, shape and
  // bytes.
  bool tied = head->dtype == wte->dtype && head->shape == wte->shape;
  if (tied)
    LOOM_RETURN_IF_ERROR(sameBytes(file, *head, *wte, tied));
  LOOM_CHECK(tied,
             "checkpoint '"
                 << file.path() << "': its LM head '" << head->name << "' ("
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
  // Tensor by tensor: host memory for one slice, not for the file.
  SafetensorsReader file;
  LOOM_RETURN_IF_ERROR(file.open(path));
  if (metadata)
    *metadata = file.metadata();
  LOOM_RETURN_IF_ERROR(checkTiedLmHead(file));
  LoadScratch scratch;
  for (const ParamView &p : executor.params()) {
    LOOM_RETURN_IF_ERROR(
        loadTensor(executor, file, p, p.name, p.buffer, scratch));
    // Mixed precision: the file's fp32 weights are the master (its own
    // block, sharded like the moments); the bf16 buffer got them rounded.
    if (p.masterBuffer >= 0)
      LOOM_RETURN_IF_ERROR(
          loadTensor(executor, file, momentView(executor, p), p.name,
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
      LOOM_RETURN_IF_ERROR(loadTensor(executor, file, p, expAvgName(p.name),
                                      static_cast<uint32_t>(p.mBuffer),
                                      scratch));
    if (p.vBuffer >= 0)
      LOOM_RETURN_IF_ERROR(loadTensor(executor, file, p, expAvgSqName(p.name),
                                      static_cast<uint32_t>(p.vBuffer),
                                      scratch));
  }
  auto it = file.metadata().find("step");
  LOOM_CHECK(it != file.metadata().end(),
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
    LOOM_RETURN_IF_ERROR(executor.copyFromBuffer(buffer, local.data(),
                                                 local.size() * sizeof(float)));
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

/// A checkpoint tensor (name and checkpoint shape) in the order a pipeline
/// stage gathers them.
using Manifest = std::vector<std::pair<std::string, std::vector<int64_t>>>;

/// Sends `manifest` to world rank `peer`: its byte count, then the text
/// ("name<TAB>d0,d1,...\n" per tensor) as whole I32 words, tagged
/// kCheckpointTag (MPI keeps the order of a peer's messages).
Status sendManifest(Communicator &comm, const Manifest &manifest, int peer) {
  std::string text;
  for (const auto &[name, shape] : manifest) {
    text += name + "\t";
    for (size_t d = 0; d < shape.size(); ++d)
      text += (d ? "," : "") + std::to_string(shape[d]);
    text += "\n";
  }
  const int32_t length = static_cast<int32_t>(text.size());
  text.resize((text.size() + 3) / 4 * 4, '\n'); // whole I32 words
  LOOM_RETURN_IF_ERROR(
      comm.sendHost(&length, 1, program::DType::I32, peer, kCheckpointTag));
  LOOM_RETURN_IF_ERROR(
      comm.sendHost(text.data(), static_cast<int64_t>(text.size() / 4),
                    program::DType::I32, peer, kCheckpointTag));
  return comm.flush();
}

/// Receives what sendManifest sent from world rank `peer` (the lead of
/// pipeline stage `stage`).
Status receiveManifest(Communicator &comm, int peer, int64_t stage,
                       const std::string &path, Manifest &manifest) {
  const std::string malformed = "cannot save '" + path + "': pipeline stage " +
                                std::to_string(stage) +
                                " sent a malformed manifest";
  int32_t length = 0;
  LOOM_RETURN_IF_ERROR(
      comm.recvHost(&length, 1, program::DType::I32, peer, kCheckpointTag));
  LOOM_CHECK(length >= 0, malformed);
  std::string text((static_cast<size_t>(length) + 3) / 4 * 4, '\0');
  LOOM_RETURN_IF_ERROR(
      comm.recvHost(text.data(), static_cast<int64_t>(text.size() / 4),
                    program::DType::I32, peer, kCheckpointTag));
  text.resize(static_cast<size_t>(length));
  manifest.clear();
  for (size_t pos = 0; pos < text.size();) {
    const size_t tab = text.find('\t', pos);
    const size_t eol = text.find('\n', pos);
    LOOM_CHECK(tab != std::string::npos && eol != std::string::npos &&
                   tab < eol,
               malformed);
    std::vector<int64_t> shape;
    const std::string dims = text.substr(tab + 1, eol - tab - 1);
    for (size_t d = 0; d < dims.size();) {
      size_t comma = dims.find(',', d);
      if (comma == std::string::npos)
        comma = dims.size();
      shape.push_back(std::strtoll(dims.c_str() + d, nullptr, 10));
      d = comma + 1;
    }
    manifest.emplace_back(text.substr(pos, tab - pos), std::move(shape));
    pos = eol + 1;
  }
  return Status::success();
}

/// One tensor of this stage's part of a checkpoint: its checkpoint name
/// and shape, and the parameter view and buffer it is gathered from.
struct StageTensor {
  std::string name;
  std::vector<int64_t> shape;
  ParamView view;
  uint32_t buffer;
};

/// The tensors this rank's stage saves, in the order every rank of the
/// stage gathers them: parameters (a mixed-precision one from its fp32
/// master, not its bf16 rounding), then for a training program the AdamW
/// moments (gathered by moment_sharding when that shards them otherwise).
std::vector<StageTensor> stageTensors(const Executor &executor) {
  std::vector<StageTensor> out;
  // A padded parameter's real rows are the leading elements (row-major):
  // the checkpoint shape leaves the padding out.
  auto add = [&](const ParamView &p, const std::string &name, int32_t buffer) {
    out.push_back(
        {name, p.checkpointShape.empty() ? p.globalShape : p.checkpointShape, p,
         static_cast<uint32_t>(buffer)});
  };
  for (const ParamView &p : executor.params()) {
    if (p.masterBuffer >= 0)
      add(momentView(executor, p), p.name, p.masterBuffer);
    else
      add(p, p.name, static_cast<int32_t>(p.buffer));
  }
  if (executor.isTraining())
    for (const ParamView &param : executor.params()) {
      const ParamView p = momentView(executor, param);
      if (p.mBuffer >= 0)
        add(p, expAvgName(p.name), p.mBuffer);
      if (p.vBuffer >= 0)
        add(p, expAvgSqName(p.name), p.vBuffer);
    }
  return out;
}

/// The writer's side of a checkpoint: writes each tensor the first time a
/// stage delivers it and checks later copies against it. A tensor several
/// stages hold is a parameter they share (GPT-2's tied wte on the first and
/// the last stage): the copies must be equal bit for bit, since every stage
/// applies the same summed gradient.
class CheckpointSink {
public:
  explicit CheckpointSink(SafetensorsWriter &writer) : writer(writer) {}

  Status put(const std::string &name, const float *values, int64_t stage) {
    if (!writer.wasWritten(name))
      return writer.write(name, values);
    const TensorEntry *e = writer.find(name);
    held.resize(static_cast<size_t>(e->numel()));
    LOOM_RETURN_IF_ERROR(writer.readBack(name, held.data()));
    if (std::memcmp(held.data(), values, e->bytes()) == 0)
      return Status::success();
    double worst = 0;
    for (size_t i = 0; i < held.size(); ++i)
      worst = std::max(worst, std::fabs(double(held[i]) - double(values[i])));
    LOOM_ERROR("cannot save '"
               << writer.path() << "': tensor '" << name
               << "' is held by several pipeline stages and stage " << stage
               << "'s copy differs from an earlier stage's (max "
               << "|difference| " << worst
               << "); the shared parameter's copies went out of step, "
                  "so the stages no longer train one model");
  }

private:
  SafetensorsWriter &writer;
  std::vector<float> held;
};

} // namespace

Status saveCheckpoint(const Executor &executor, const std::string &path,
                      int64_t completedSteps,
                      const std::map<std::string, std::string> &runMetadata) {
  Communicator &comm = executor.communicator();
  // Every rank of a stage gathers its stage's tensors (collectives within
  // the stage); the stage's lead holds them. Without a pipeline that is
  // rank 0, which writes; a pipeline stage's lead sends its tensors to rank
  // 0 (stage 0's lead), which writes them all. Tensor by tensor, so a rank
  // holds one global tensor at a time, not the checkpoint.
  const int ppAxis = pipelineAxis(executor);
  const bool holder = leadsStage(comm, ppAxis);
  const bool writer = comm.rank() == 0;
  const int64_t stages = ppAxis >= 0 ? comm.mesh()[ppAxis].size : 1;
  std::map<std::string, std::string> metadata{{"format", "pt"},
                                              {"producer", "loom"}};
  if (executor.isTraining())
    metadata["step"] = std::to_string(completedSteps);
  for (const auto &[key, value] : runMetadata) {
    LOOM_CHECK(!metadata.count(key), "cannot save '"
                                         << path << "': metadata \"" << key
                                         << "\" is the checkpoint's own");
    metadata[key] = value;
  }
  const std::vector<StageTensor> mine = stageTensors(executor);

  // 1. The file's layout: every stage's tensors, known before any is
  // gathered (the other stages' leads send their manifests first).
  std::vector<Manifest> manifests(static_cast<size_t>(stages));
  for (const StageTensor &t : mine)
    manifests[0].emplace_back(t.name, t.shape);
  std::vector<int64_t> peers(static_cast<size_t>(stages), 0);
  if (ppAxis >= 0 && holder) {
    if (writer) {
      std::vector<int64_t> c = comm.coords();
      for (int64_t s = 1; s < stages; ++s) {
        c[ppAxis] = s;
        peers[s] = comm.rankOf(c);
        LOOM_RETURN_IF_ERROR(receiveManifest(comm, static_cast<int>(peers[s]),
                                             s, path, manifests[s]));
      }
    } else {
      LOOM_RETURN_IF_ERROR(sendManifest(comm, manifests[0], 0));
    }
  }
  SafetensorsWriter file;
  if (writer) {
    std::map<std::string, std::pair<std::vector<int64_t>, int64_t>> shapes;
    std::vector<TensorEntry> entries;
    for (int64_t s = 0; s < stages; ++s)
      for (const auto &[name, shape] : manifests[s]) {
        auto [it, fresh] = shapes.emplace(name, std::make_pair(shape, s));
        LOOM_CHECK(fresh || it->second.first == shape,
                   "cannot save '" << path << "': tensor '" << name
                                   << "' has shape " << shapeStr(shape)
                                   << " on pipeline stage " << s << " but "
                                   << shapeStr(it->second.first) << " on stage "
                                   << it->second.second);
        if (!fresh)
          continue;
        TensorEntry e;
        e.name = name;
        e.dtype = DType::F32;
        e.shape = shape;
        entries.push_back(std::move(e));
      }
    LOOM_RETURN_IF_ERROR(file.create(path, std::move(entries), metadata));
  }
  CheckpointSink sink(file);

  // 2. This stage's tensors: gathered, then written (rank 0) or sent to
  // rank 0 (another stage's lead; flushed, so one is in flight at a time).
  std::vector<float> global;
  for (const StageTensor &t : mine) {
    Status s = gatherParamTensor(executor, t.view, t.buffer, global);
    if (!s.ok())
      return s.withContext("cannot save '" + path + "'");
    if (writer) {
      LOOM_RETURN_IF_ERROR(sink.put(t.name, global.data(), 0));
    } else if (holder && ppAxis >= 0) {
      LOOM_RETURN_IF_ERROR(
          comm.sendHost(global.data(), program::shapeNumel(t.shape),
                        program::DType::F32, 0, kCheckpointTag));
      LOOM_RETURN_IF_ERROR(comm.flush());
    }
  }
  if (!writer)
    return Status::success();

  // 3. The other stages' tensors, in their manifests' order.
  for (int64_t s = 1; s < stages; ++s)
    for (const auto &[name, shape] : manifests[s]) {
      global.resize(static_cast<size_t>(program::shapeNumel(shape)));
      LOOM_RETURN_IF_ERROR(comm.recvHost(
          global.data(), static_cast<int64_t>(global.size()),
          program::DType::F32, static_cast<int>(peers[s]), kCheckpointTag));
      LOOM_RETURN_IF_ERROR(sink.put(name, global.data(), s));
    }
  return file.commit();
}

} // namespace loom
