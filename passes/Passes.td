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

#endif // LOOM_PASSES_PASSES_TD
