//===- flash_shape_tuning.h - Attention shapes timed on the GPU -*- C++ -*-===//
//
// Which launch shape (flash_attention_mma.h's FlashTcOccupancy) each
// tensor-core attention kernel runs in. The fastest depends on the device
// (registers and L2 bandwidth per SM, the SM count) and on the geometry (how
// many blocks a grid has to fill the SMs with), which ptxas cannot settle.
// So by default (LOOM_CUDA_FLASH_SHAPE=auto) the first attention of each
// geometry (B, T, heads) times every shape of each of its kernels on the
// device and keeps the fastest, as cuDNN's benchmark mode and Triton's
// autotuner do; a fixed LOOM_CUDA_FLASH_SHAPE (spill0, blocks, wide, tall) runs
// every kernel in that shape and times nothing.
//
// Every shape computes the same bits (the same arithmetic in the same order:
// FlashAttentionEmulation.TensorCoreOccupanciesComputeTheSameValues, and
// bench/attention_cuda.cpp's differences on a device), so the choice moves
// time, never a result, and the timing launches may rewrite the outputs
// the real launch just wrote.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CUDA_FLASH_SHAPE_TUNING_H
#define LOOM_RUNTIME_CUDA_FLASH_SHAPE_TUNING_H

#include "runtime/core/status.h"
#include "runtime/cuda/flash_attention_mma.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace loom::cuda {

/// The three launches of the tensor-core attention.
enum class FlashKernel { Forward, Keys, Queries };

/// "forward", "dK/dV", "dQ".
const char *flashKernelName(FlashKernel kernel);
/// LOOM_CUDA_FLASH_SHAPE's name of a shape: "spill0", "blocks", "wide",
/// "tall".
const char *flashShapeName(FlashTcOccupancy shape);
/// The shapes `kernel` is compiled in, the default (FlashTcShapes') first:
/// the forward has four, dK/dV two (MoreBlocks and TallWarps run it as
/// FewestSpills), dQ three (TallWarps runs it as FewestSpills).
std::vector<FlashTcOccupancy> flashShapeCandidates(FlashKernel kernel);

/// Index of the smallest time in `ms` (not empty); of equal ones the first,
/// so a tie keeps the default.
size_t fastestCandidate(const std::vector<double> &ms);

/// What the shapes are chosen for: an attention over B sequences of T
/// tokens in NH heads of 64.
struct FlashGeometry {
  int64_t B = 0, T = 0, NH = 0;
  bool operator<(const FlashGeometry &o) const {
    return std::tie(B, T, NH) < std::tie(o.B, o.T, o.NH);
  }
};

class FlashShapeTuner {
public:
  /// Runs every kernel in `fixed`, or without it times each new geometry.
  explicit FlashShapeTuner(
      std::optional<FlashTcOccupancy> fixed = std::nullopt);

  /// The shapes geometry `g` runs in: the fixed one, else those timed for
  /// it (FlashTcShapes' defaults for kernels not timed yet).
  FlashTcShapes shapesFor(const FlashGeometry &g) const;
  /// Whether `kernel` of `g` is still to be timed (never with a fixed shape).
  bool untimed(FlashKernel kernel, const FlashGeometry &g) const;

  /// Runs one launch of the kernel in the given shape on the stream given
  /// to time(), with the inputs and outputs of the attention being run.
  using Launch = std::function<Status(FlashTcOccupancy)>;
  /// Times `launch` in each candidate shape of `kernel` on `stream`: one
  /// warm-up launch each (the first launch loads the kernel), then
  /// kRounds rounds that launch each once between two events, the
  /// candidates taking turns so drift in clocks or in other load on the
  /// device hits them alike. Keeps the one with the shortest launch for
  /// `g`. Waits for the stream (once per geometry and kernel).
  Status time(FlashKernel kernel, const FlashGeometry &g, cudaStream_t stream,
              const Launch &launch);

  /// A line per timed geometry, e.g. "B=16 T=1024 heads=12: forward wide
  /// 0.183 ms (spill0 0.201, blocks 0.190); dK/dV spill0 ...; dQ ...".
  std::vector<std::string> choices() const;

  static constexpr int kRounds = 3;

private:
  struct Timed {
    /// Each candidate's shortest launch, in candidate order.
    std::vector<std::pair<FlashTcOccupancy, double>> ms;
    /// The fastest's index in ms.
    size_t chosen = 0;
    FlashTcOccupancy shape() const { return ms[chosen].first; }
  };
  using PerKernel = std::array<std::optional<Timed>, 3>;

  std::optional<FlashTcOccupancy> fixed;
  std::map<FlashGeometry, PerKernel> timed;
};

} // namespace loom::cuda

#endif // LOOM_RUNTIME_CUDA_FLASH_SHAPE_TUNING_H
