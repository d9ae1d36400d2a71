//===- flash_shape_tuning.cpp - Attention shapes timed on the GPU ---------===//
//
// See flash_shape_tuning.h.
//
//===----------------------------------------------------------------------===//
#include "runtime/cuda/flash_shape_tuning.h"

#include "runtime/cuda/check.h"

#include <cstdio>
#include <limits>

namespace loom::cuda {

const char *flashKernelName(FlashKernel kernel) {
  switch (kernel) {
  case FlashKernel::Forward:
    return "forward";
  case FlashKernel::Keys:
    return "dK/dV";
  case FlashKernel::Queries:
    return "dQ";
  }
  return "?";
}

const char *flashShapeName(FlashTcOccupancy shape) {
  switch (shape) {
  case FlashTcOccupancy::FewestSpills:
    return "spill0";
  case FlashTcOccupancy::MoreBlocks:
    return "blocks";
  case FlashTcOccupancy::WideBlocks:
    return "wide";
  case FlashTcOccupancy::TallWarps:
    return "tall";
  }
  return "?";
}

std::vector<FlashTcOccupancy> flashShapeCandidates(FlashKernel kernel) {
  switch (kernel) {
  case FlashKernel::Forward:
    return {FlashTcOccupancy::FewestSpills, FlashTcOccupancy::MoreBlocks,
            FlashTcOccupancy::WideBlocks, FlashTcOccupancy::TallWarps};
  case FlashKernel::Keys:
    return {FlashTcOccupancy::FewestSpills, FlashTcOccupancy::WideBlocks};
  case FlashKernel::Queries:
    return {FlashTcOccupancy::FewestSpills, FlashTcOccupancy::MoreBlocks,
            FlashTcOccupancy::WideBlocks};
  }
  return {FlashTcOccupancy::FewestSpills};
}

size_t fastestCandidate(const std::vector<double> &ms) {
  size_t best = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] < ms[best])
      best = i;
  return best;
}

FlashShapeTuner::FlashShapeTuner(std::optional<FlashTcOccupancy> fixed)
    : fixed(fixed) {}

FlashTcShapes FlashShapeTuner::shapesFor(const FlashGeometry &g) const {
  if (fixed)
    return FlashTcShapes::all(*fixed);
  FlashTcShapes shapes;
  auto it = timed.find(g);
  if (it == timed.end())
    return shapes;
  const PerKernel &k = it->second;
  if (k[0])
    shapes.forward = k[0]->shape();
  if (k[1])
    shapes.keys = k[1]->shape();
  if (k[2])
    shapes.queries = k[2]->shape();
  return shapes;
}

bool FlashShapeTuner::untimed(FlashKernel kernel,
                              const FlashGeometry &g) const {
  if (fixed)
    return false;
  auto it = timed.find(g);
  return it == timed.end() || !it->second[static_cast<size_t>(kernel)];
}

namespace {

/// A start and a stop event, destroyed with the object.
struct EventPair {
  cudaEvent_t start = nullptr, stop = nullptr;
  ~EventPair() {
    if (start)
      cudaEventDestroy(start);
    if (stop)
      cudaEventDestroy(stop);
  }
};

} // namespace

Status FlashShapeTuner::time(FlashKernel kernel, const FlashGeometry &g,
                             cudaStream_t stream, const Launch &launch) {
  const std::vector<FlashTcOccupancy> candidates = flashShapeCandidates(kernel);
  auto context = [&](FlashTcOccupancy shape) {
    return std::string("timing the attention's ") + flashKernelName(kernel) +
           " kernel in launch shape " + flashShapeName(shape) +
           " (LOOM_CUDA_FLASH_SHAPE=auto; set spill0, blocks or wide to "
           "skip the timing)";
  };
  EventPair events;
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&events.start, cudaEventDefault));
  LOOM_CUDA_CHECK(cudaEventCreateWithFlags(&events.stop, cudaEventDefault));
  for (FlashTcOccupancy shape : candidates) {
    Status s = launch(shape);
    if (!s.ok())
      return s.withContext(context(shape));
  }
  std::vector<double> best(candidates.size(),
                           std::numeric_limits<double>::infinity());
  for (int round = 0; round < kRounds; ++round)
    for (size_t c = 0; c < candidates.size(); ++c) {
      LOOM_CUDA_CHECK(cudaEventRecord(events.start, stream));
      Status s = launch(candidates[c]);
      if (!s.ok())
        return s.withContext(context(candidates[c]));
      LOOM_CUDA_CHECK(cudaEventRecord(events.stop, stream));
      LOOM_CUDA_CHECK(cudaEventSynchronize(events.stop));
      float ms = 0;
      LOOM_CUDA_CHECK(cudaEventElapsedTime(&ms, events.start, events.stop));
      best[c] = std::min(best[c], static_cast<double>(ms));
    }
  Timed result;
  result.chosen = fastestCandidate(best);
  for (size_t c = 0; c < candidates.size(); ++c)
    result.ms.emplace_back(candidates[c], best[c]);
  timed[g][static_cast<size_t>(kernel)] = std::move(result);
  return Status::success();
}

std::vector<std::string> FlashShapeTuner::choices() const {
  std::vector<std::string> lines;
  for (const auto &[g, kernels] : timed) {
    std::string line = "B=" + std::to_string(g.B) +
                       " T=" + std::to_string(g.T) +
                       " heads=" + std::to_string(g.NH) + ":";
    const char *separator = " ";
    for (size_t k = 0; k < kernels.size(); ++k) {
      if (!kernels[k])
        continue;
      const Timed &timed = *kernels[k];
      char ms[32];
      std::snprintf(ms, sizeof(ms), "%.3f", timed.ms[timed.chosen].second);
      line += separator;
      line += std::string(flashKernelName(static_cast<FlashKernel>(k))) + " " +
              flashShapeName(timed.shape()) + " " + ms + " ms (";
      const char *comma = "";
      for (size_t c = 0; c < timed.ms.size(); ++c) {
        if (c == timed.chosen)
          continue;
        std::snprintf(ms, sizeof(ms), "%.3f", timed.ms[c].second);
        line +=
            std::string(comma) + flashShapeName(timed.ms[c].first) + " " + ms;
        comma = ", ";
      }
      line += ")";
      separator = "; ";
    }
    lines.push_back(std::move(line));
  }
  return lines;
}

} // namespace loom::cuda
