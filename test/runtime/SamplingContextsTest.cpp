//===- SamplingContextsTest.cpp - --context-programs checks -----*- C++ -*-===//
//
// SamplingContexts::create refuses a shorter program whose parameter table
// is not the sampled program's (count, names, dtypes and shapes) when the
// file is given, before any context reaches it. The model-level checks
// (dimensions, seq, training program, precision) are exercised end to end
// by test/e2e/sample-context-programs.test.
//
//===----------------------------------------------------------------------===//
#include "ProgramTestUtil.h"

#include "runtime/core/sampling_contexts.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <unistd.h>

using namespace loom;
using namespace loom::test;

namespace {

/// miniGpt() at seq 8 (the sampled program's executor) against one at seq 4
/// edited by `edit`; returns create()'s status.
Status createWith(const std::function<void(fb::ProgramT &)> &edit) {
  MiniGptDims longDims;
  longDims.T = 8;
  program::LoadedProgram longest;
  Status s =
      program::loadProgramBytes(serialize(*miniGpt(longDims)), "l", longest);
  if (!s.ok())
    return s;
  std::unique_ptr<Executor> ex;
  LOOM_RETURN_IF_ERROR(Executor::create(longest, 0, 1, ex));
  MiniGptDims shortDims = longDims;
  shortDims.T = 4;
  auto shorter = miniGpt(shortDims);
  // The compiler keeps n_positions and wpe whole at any seq.
  shorter->model->n_positions = longDims.T;
  edit(*shorter);
  const std::string path =
      ::testing::TempDir() + "loom_ctx_" + std::to_string(::getpid()) + ".loom";
  std::ofstream(path, std::ios::binary) << serialize(*shorter);
  std::unique_ptr<SamplingContexts> contexts;
  s = SamplingContexts::create(
      *ex, {path},
      [](const program::LoadedProgram &, std::unique_ptr<Executor> &) {
        return Status::error("no context may be created while checking");
      },
      contexts);
  std::remove(path.c_str());
  return s;
}

/// The stage-0 parameter named `name`.
fb::ParamT &paramNamed(fb::ProgramT &p, const std::string &name) {
  for (auto &param : p.stages[0]->params)
    if (param->name == name)
      return *param;
  ADD_FAILURE() << "no parameter " << name;
  return *p.stages[0]->params[0];
}

TEST(SamplingContexts, ParameterTablesAreCheckedWhenTheFileIsGiven) {
  // Only wpe differs (seq rows): its shape is named.
  Status s = createWith([](fb::ProgramT &) {});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameter 'wpe.weight' is F32 [4, 16] there but "
                             "F32 [8, 16] in the program sampled from"),
            std::string::npos)
      << s.toString();
  // A parameter missing: the counts are named.
  s = createWith([](fb::ProgramT &p) { p.stages[0]->params.pop_back(); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("parameters but the program sampled from has"),
            std::string::npos)
      << s.toString();
  // A parameter under another name.
  s = createWith(
      [](fb::ProgramT &p) { paramNamed(p, "wte.weight").name = "wte.other"; });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("has parameter 'wte.other', which the program "
                             "sampled from does not"),
            std::string::npos)
      << s.toString();
}

} // namespace
