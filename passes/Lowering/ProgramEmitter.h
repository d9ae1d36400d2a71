//===- ProgramEmitter.h - Planned IR -> runtime program file ----*- C++ -*-===//
//
// The compiler side of the program contract (runtime/program/program.fbs):
// every function planned by --loom-plan-buffers becomes one stage.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_LOWERING_PROGRAMEMITTER_H
#define LOOM_PASSES_LOWERING_PROGRAMEMITTER_H

#include "mlir/IR/BuiltinOps.h"
#include "runtime/program/program_generated.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>

namespace mlir::loom {

/// The runtime instruction `op` becomes; none for ops the program format
/// cannot express (views and block structure are not instructions).
std::optional<::loom::program::Opcode> opcodeOf(Operation *op);

/// Serializes the planned functions of `module` into a program file
/// (envelope + FlatBuffer) on `os`. Fails with a diagnostic on IR that was
/// not planned or that the runtime cannot run.
LogicalResult emitProgram(ModuleOp module, llvm::raw_ostream &os);

/// Prints a program file as text (stages, parameters, buffers,
/// instructions) for inspection and FileCheck; `file` is the whole file.
/// Returns false with `error` set when the file is not a valid program.
bool dumpProgram(llvm::StringRef file, llvm::raw_ostream &os,
                 std::string &error);

} // namespace mlir::loom

#endif // LOOM_PASSES_LOWERING_PROGRAMEMITTER_H
