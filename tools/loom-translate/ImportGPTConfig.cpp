//===- ImportGPTConfig.cpp - --import-gpt-config translation ----*- C++ -*-===//
//
// `loom-translate --import-gpt-config config.json --batch B --seq T` prints
// the model IR of an HF GPT-2-style configuration.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/Models/GPTModel.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

static llvm::cl::OptionCategory importCategory("GPT config import options");
static llvm::cl::opt<int64_t>
    batchSize("batch", llvm::cl::desc("Rows per training step (default 1)"),
              llvm::cl::init(1), llvm::cl::cat(importCategory));
static llvm::cl::opt<int64_t> seqLength(
    "seq",
    llvm::cl::desc("Tokens per row (default: the config's n_positions)"),
    llvm::cl::init(0), llvm::cl::cat(importCategory));

namespace mlir::loom {
void registerImportGPTConfig() {
  TranslateToMLIRRegistration registration(
      "import-gpt-config", "HF GPT-2 config.json to Loom model IR",
      [](llvm::SourceMgr &sourceMgr,
         MLIRContext *context) -> OwningOpRef<Operation *> {
        const llvm::MemoryBuffer *buffer =
            sourceMgr.getMemoryBuffer(sourceMgr.getMainFileID());
        Location loc = FileLineColLoc::get(
            context, buffer->getBufferIdentifier(), /*line=*/1, /*column=*/1);
        llvm::Expected<loom::GPTConfig> config = loom::parseGPTConfig(
            buffer->getBuffer(), batchSize.getValue(), seqLength.getValue());
        if (!config) {
          emitError(loc) << llvm::toString(config.takeError());
          return nullptr;
        }
        return buildGPTModel(context, *config);
      },
      [](DialectRegistry &registry) {
        registry.insert<loom::LoomDialect, func::FuncDialect>();
      });
}
} // namespace mlir::loom
