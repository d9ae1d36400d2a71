//===- loom-translate.cpp - Into and out of Loom IR -------------*- C++ -*-===//
//
// MlirTranslateMain with Loom's translations:
//   --import-gpt-config   HF GPT-2 config.json -> model IR
//   --loom-to-program     planned IR -> runtime program file
//   --loom-program-dump   program file -> text
//
//===----------------------------------------------------------------------===//

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

namespace mlir::loom {
void registerImportGPTConfig();
void registerProgramTranslations();
} // namespace mlir::loom

int main(int argc, char **argv) {
  mlir::loom::registerImportGPTConfig();
  mlir::loom::registerProgramTranslations();
  return mlir::failed(
      mlir::mlirTranslateMain(argc, argv, "Loom translation driver\n"));
}
