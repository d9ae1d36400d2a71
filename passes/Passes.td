//===- Passes.td - All Loom passes ----------------------------*- tablegen -*-===//
//
// Every pass is declared here; the implementation lives in the folder of its
// concern (Analysis/, Autodiff/, Sharding/, ...). Flags are kebab-case and
// prefixed `loom-`.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_PASSES_PASSES_TD
#define LOOM_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Analysis
//===----------------------------------------------------------------------===//

def LoomSummary : Pass<"loom-summary", "::mlir::ModuleOp"> {
  let summary = "Print a summary of each model: config, parameters, FLOPs";
  let description = [{
    For every function carrying `loom.model`, prints the configuration, the
    parameter count Φ (total, per block, outside the blocks) and its fp32
    size, the tokens per step, and the forward FLOPs and bytes of one step
    from the ops' cost interface, next to the 2·Φ·tokens rule of thumb.
    The IR is left unchanged.

    **Options:**
    * `json`: print one JSON object per model instead of text.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print JSON instead of text">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

def LoomPlanBuffers : Pass<"loom-plan-buffers", "::mlir::ModuleOp"> {
  let summary = "Give every tensor a static offset in one arena per rank";
  let description = [{
    Linearizes each model function as the runtime will execute it (blocks
    inlined; reshapes and block boundaries are views), computes each
    storage's live range, and places it in one arena: parameters, inputs and
    targets first and for the whole step, then every other tensor and
    kernel scratch (attention probabilities, layer-norm statistics) by
    greedy best-fit in decreasing size, reusing bytes whose previous tenant
    is dead. Annotates:

    * function arguments: `loom.offset` (bytes);
    * ops: `loom.offsets` (one per result) and `loom.scratch_offsets`;
    * the function: `loom.arena_bytes`, the arena size = predicted peak.

    `loom-translate --loom-to-program` reads these annotations.

    **Options:**
    * `alignment`: byte alignment of every buffer (default 64).
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "Byte alignment of every buffer">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

#endif // LOOM_PASSES_PASSES_TD
