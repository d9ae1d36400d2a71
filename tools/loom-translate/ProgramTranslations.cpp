//===- ProgramTranslations.cpp - IR <-> runtime program files ---*- C++ -*-===//
//
//   --loom-to-program     planned IR -> program file (binary)
//   --loom-program-dump   program file -> text (inspection, FileCheck)
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "passes/Lowering/ProgramEmitter.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Tools/mlir-translate/Translation.h"
#include "llvm/Support/SourceMgr.h"

using namespace mlir;

namespace mlir::loom {
void registerProgramTranslations() {
  TranslateFromMLIRRegistration toProgram(
      "loom-to-program", "Loom IR planned by --loom-plan-buffers to a program",
      [](Operation *op, llvm::raw_ostream &os) -> LogicalResult {
        auto module = dyn_cast<ModuleOp>(op);
        if (!module)
          return op->emitError() << "expected a builtin.module";
        return emitProgram(module, os);
      },
      [](DialectRegistry &registry) {
        registry.insert<LoomDialect, func::FuncDialect>();
      });

  TranslateRegistration dump(
      "loom-program-dump", "Print a program file as text",
      [](const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
         llvm::raw_ostream &os, MLIRContext *context) -> LogicalResult {
        const llvm::MemoryBuffer *buffer =
            sourceMgr->getMemoryBuffer(sourceMgr->getMainFileID());
        std::string error;
        if (dumpProgram(buffer->getBuffer(), os, error))
          return success();
        emitError(FileLineColLoc::get(context, buffer->getBufferIdentifier(),
                                      0, 0))
            << error;
        return failure();
      });
}
} // namespace mlir::loom
