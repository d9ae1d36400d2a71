//===- GPTModel.h - GPT-2 model IR from a configuration ---------*- C++ -*-===//
//
// Builds the forward training graph (params + tokens + targets -> loss) of a
// GPT-2-style model in the loom dialect, from an HF `config.json`.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECTS_LOOM_MODELS_GPTMODEL_H
#define LOOM_DIALECTS_LOOM_MODELS_GPTMODEL_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <string>

namespace mlir::loom {

/// The shape of a GPT-2-style model and of one training step.
struct GPTConfig {
  int64_t nLayer = 0;
  int64_t nHead = 0;
  int64_t nEmbd = 0;
  int64_t vocabSize = 0;
  int64_t nPositions = 0;
  double layerNormEpsilon = 1e-5;
  double initializerRange = 0.02;
  /// Rows per step and tokens per row.
  int64_t batch = 1;
  int64_t seq = 0;
};

/// Parses an HF GPT-2 `config.json` (`n_layer`, `n_head`, `n_embd`,
/// `vocab_size`, `n_positions` or `n_ctx`; optional `layer_norm_epsilon`,
/// `initializer_range`; other keys ignored). `seq` 0 means n_positions.
/// The result is validated (see validateGPTConfig).
llvm::Expected<GPTConfig> parseGPTConfig(llvm::StringRef json, int64_t batch,
                                         int64_t seq);

/// Checks a configuration: positive sizes, n_embd divisible by n_head,
/// seq <= n_positions. The error says which field and how to fix it.
llvm::Error validateGPTConfig(const GPTConfig &config);

/// Builds a module holding `func.func @gpt2` for `config`, which must be
/// valid. Parameters carry HF GPT-2 names and GPT-2 initializers; every
/// transformer layer is one `loom.block "h.<i>"`.
OwningOpRef<ModuleOp> buildGPTModel(MLIRContext *context,
                                    const GPTConfig &config);

} // namespace mlir::loom

#endif // LOOM_DIALECTS_LOOM_MODELS_GPTMODEL_H
