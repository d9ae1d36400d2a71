//===- model_flops.cpp - Model FLOPs per token and MFU ----------*- C++ -*-===//
#include "runtime/core/model_flops.h"

#include <set>
#include <string>

namespace loom {

int64_t modelParameterCount(const program::Program &program) {
  std::set<std::string> seen;
  int64_t total = 0;
  const auto *stages = program.stages();
  for (uint32_t s = 0; stages && s < stages->size(); ++s) {
    const auto *params = stages->Get(s)->params();
    for (uint32_t p = 0; params && p < params->size(); ++p) {
      const program::Param *param = params->Get(p);
      if (!param->name() || !seen.insert(param->name()->str()).second)
        continue;
      int64_t numel = 1;
      if (const auto *shape = param->global_shape())
        for (int64_t d : *shape)
          numel *= d;
      total += numel;
    }
  }
  return total;
}

double trainingFlopsPerToken(const program::Program &program) {
  const program::ModelInfo *m = program.model();
  const double N = static_cast<double>(modelParameterCount(program));
  if (!m)
    return 6 * N;
  return 6 * N + 6.0 * static_cast<double>(m->n_layer()) *
                     static_cast<double>(m->n_embd()) *
                     static_cast<double>(m->seq());
}

double modelFlopsUtilization(double flopsPerToken, double tokensPerSec,
                             double peakTflops, int devices) {
  if (peakTflops <= 0 || devices <= 0)
    return 0;
  return flopsPerToken * tokensPerSec / (peakTflops * 1e12 * devices);
}

} // namespace loom
