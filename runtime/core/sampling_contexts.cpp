//===- sampling_contexts.cpp - Shorter programs for short contexts --------===//
#include "runtime/core/sampling_contexts.h"

#include "runtime/program/program.h"

#include <algorithm>
#include <map>
#include <utility>

namespace loom {

namespace {

/// Checks that the one stage of the program at `path` holds the parameters
/// of `longest` under the same names, each in a buffer of the same dtype
/// and shape, with fp32 master weights where longest has them: what
/// copyWeights copies, checked when the file is given, not when a context
/// first reaches it.
Status checkSameParams(const program::Stage &stage, const Executor &longest,
                       const std::string &path) {
  const std::string where = "--context-programs file '" + path + "'";
  std::map<std::string, const ParamView *> byName;
  for (const ParamView &p : longest.params())
    byName[p.name] = &p;
  const auto *params = stage.params();
  const size_t count = params ? params->size() : 0;
  LOOM_CHECK(count == byName.size(),
             where << " has " << count
                   << " parameters but the program sampled from has "
                   << byName.size() << "; compile both from the same config");
  // The program was verified when loaded: its parameters' buffers exist.
  auto same = [&](const std::string &name, uint32_t mine,
                  uint32_t theirs) -> Status {
    const program::DType dtype = stage.buffers()->Get(mine)->dtype();
    const std::vector<int64_t> shape = program::bufferShape(stage, mine);
    LOOM_CHECK(dtype == longest.bufferDType(theirs) &&
                   shape == longest.bufferShape(theirs),
               where << ": parameter '" << name << "' is "
                     << program::EnumNameDType(dtype) << " "
                     << program::shapeString(shape) << " there but "
                     << program::EnumNameDType(longest.bufferDType(theirs))
                     << " " << program::shapeString(longest.bufferShape(theirs))
                     << " in the program sampled from; compile both with the "
                        "same config and --precision");
    return Status::success();
  };
  for (size_t i = 0; i < count; ++i) {
    const program::Param *p =
        params->Get(static_cast<flatbuffers::uoffset_t>(i));
    const std::string name = p->name() ? p->name()->str() : "";
    auto it = byName.find(name);
    LOOM_CHECK(it != byName.end(),
               where << " has parameter '" << name
                     << "', which the program sampled from does not");
    const ParamView &from = *it->second;
    LOOM_RETURN_IF_ERROR(same(name, p->buffer(), from.buffer));
    LOOM_CHECK((from.masterBuffer >= 0) == (p->master_buffer() >= 0),
               where << ": parameter '" << name << "' "
                     << (p->master_buffer() >= 0 ? "has" : "has no")
                     << " fp32 master weights but not so in the program "
                        "sampled from; compile both with the same --precision");
    if (p->master_buffer() >= 0)
      LOOM_RETURN_IF_ERROR(same(name + " (master)",
                                static_cast<uint32_t>(p->master_buffer()),
                                static_cast<uint32_t>(from.masterBuffer)));
  }
  return Status::success();
}

} // namespace

Status SamplingContexts::create(Executor &longest,
                                const std::vector<std::string> &shorterPaths,
                                CreateExecutor createExecutor,
                                std::unique_ptr<SamplingContexts> &out) {
  std::unique_ptr<SamplingContexts> contexts(new SamplingContexts());
  contexts->longest = &longest;
  contexts->createExecutor = std::move(createExecutor);
  const program::ModelInfo &model = longest.model();
  for (const std::string &path : shorterPaths) {
    Rung rung;
    rung.path = path;
    rung.program = std::make_unique<program::LoadedProgram>();
    LOOM_RETURN_IF_ERROR(program::loadProgramFile(path, *rung.program));
    const program::Program &p = *rung.program->root();
    const std::string where = "--context-programs file '" + path + "'";
    LOOM_CHECK(p.model(), where << " has no model info");
    const program::ModelInfo &m = *p.model();
    LOOM_CHECK(m.n_layer() == model.n_layer() && m.n_head() == model.n_head() &&
                   m.n_embd() == model.n_embd() &&
                   m.vocab_size() == model.vocab_size() &&
                   m.n_positions() == model.n_positions(),
               where << " is a model of n_layer " << m.n_layer() << ", n_head "
                     << m.n_head() << ", n_embd " << m.n_embd()
                     << ", vocab_size " << m.vocab_size() << ", n_positions "
                     << m.n_positions() << " but the program sampled from has "
                     << model.n_layer() << ", " << model.n_head() << ", "
                     << model.n_embd() << ", " << model.vocab_size() << ", "
                     << model.n_positions()
                     << "; compile both from the same config");
    LOOM_CHECK((!p.mesh() || p.mesh()->size() == 0) && p.stages() &&
                   p.stages()->size() == 1,
               where << " runs on several ranks or pipeline stages; "
                        "sampling runs one rank (compile without --mesh)");
    const auto *update = p.stages()->Get(0)->update_instructions();
    LOOM_CHECK(!update || update->size() == 0,
               where << " is a training program; sampling runs evaluation "
                        "programs (compile without --train)");
    LOOM_CHECK(m.seq() >= 1 && m.seq() < model.seq(),
               where << " has seq " << m.seq()
                     << ", not shorter than the program sampled from ("
                     << model.seq()
                     << "); pass programs compiled with a smaller --seq");
    LOOM_RETURN_IF_ERROR(checkSameParams(*p.stages()->Get(0), longest, path));
    rung.seq = m.seq();
    contexts->rungs.push_back(std::move(rung));
  }
  std::sort(contexts->rungs.begin(), contexts->rungs.end(),
            [](const Rung &a, const Rung &b) { return a.seq < b.seq; });
  for (size_t i = 1; i < contexts->rungs.size(); ++i)
    LOOM_CHECK(contexts->rungs[i].seq != contexts->rungs[i - 1].seq,
               "--context-programs files '"
                   << contexts->rungs[i - 1].path << "' and '"
                   << contexts->rungs[i].path << "' both have seq "
                   << contexts->rungs[i].seq << "; pass one of them");
  contexts->currentRung = contexts->rungs.size();
  out = std::move(contexts);
  return Status::success();
}

std::vector<int64_t> SamplingContexts::seqs() const {
  std::vector<int64_t> s;
  for (const Rung &r : rungs)
    s.push_back(r.seq);
  return s;
}

Status SamplingContexts::executorFor(int64_t length, Executor *&ex) {
  size_t rung = 0;
  while (rung < rungs.size() && rungs[rung].seq < length)
    ++rung;
  if (rung == rungs.size()) {
    // The context has outgrown every shorter program; it never shrinks.
    current.reset();
    currentRung = rungs.size();
    ex = longest;
    return Status::success();
  }
  if (rung != currentRung) {
    // Free the previous one first: two executors at most.
    current.reset();
    currentRung = rungs.size();
    std::unique_ptr<Executor> created;
    LOOM_RETURN_IF_ERROR(
        createExecutor(*rungs[rung].program, created)
            .withContext("--context-programs file '" + rungs[rung].path + "'"));
    LOOM_RETURN_IF_ERROR(copyWeights(*created, rungs[rung].path));
    current = std::move(created);
    currentRung = rung;
  }
  ex = current.get();
  return Status::success();
}

Status SamplingContexts::copyWeights(Executor &to,
                                     const std::string &path) const {
  // create() checked that `to`'s program holds longest's parameters, alike.
  std::map<std::string, const ParamView *> byName;
  for (const ParamView &p : longest->params())
    byName[p.name] = &p;
  std::vector<uint8_t> host;
  auto copy = [&](uint32_t src, uint32_t dst) -> Status {
    const uint64_t bytes = to.bufferBytes(dst);
    LOOM_CHECK(bytes == longest->bufferBytes(src),
               "--context-programs file '" << path
                                           << "': a parameter buffer differs "
                                              "in size from the program "
                                              "sampled from");
    host.resize(bytes);
    LOOM_RETURN_IF_ERROR(longest->copyFromBuffer(src, host.data(), bytes));
    return to.copyToBuffer(dst, host.data(), bytes);
  };
  for (const ParamView &p : to.params()) {
    auto it = byName.find(p.name);
    LOOM_CHECK(it != byName.end(), "--context-programs file '"
                                       << path << "' has parameter '" << p.name
                                       << "', which the program "
                                       << "sampled from does not");
    const ParamView &from = *it->second;
    LOOM_RETURN_IF_ERROR(copy(from.buffer, p.buffer));
    if (p.masterBuffer >= 0)
      LOOM_RETURN_IF_ERROR(copy(static_cast<uint32_t>(from.masterBuffer),
                                static_cast<uint32_t>(p.masterBuffer)));
  }
  return Status::success();
}

} // namespace loom
