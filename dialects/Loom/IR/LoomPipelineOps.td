//===- LoomPipelineOps.td - Schedule and its collective ----*- tablegen -*-===//
//
// What --loom-pipeline writes besides the stage functions: the schedule (per
// pipeline stage, the ordered forward / backward actions on micro-batches)
// and the all-reduce of a parameter that lives on several stages (GPT-2's
// tied `wte` on the first and the last). Included from LoomOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECT_LOOM_IR_LOOMPIPELINEOPS_TD
#define LOOM_DIALECT_LOOM_IR_LOOMPIPELINEOPS_TD

def Loom_PipelineScheduleOp : Loom_Op<"pipeline_schedule", [
    HasParent<"::mlir::ModuleOp">,
    DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "The pipeline of a training step: its cut and its schedule";
  let description = [{
    A training step cut into `stages` x `virtual` model chunks. Chunk k runs
    on pipeline stage k mod `stages` (with `virtual` > 1 a stage holds the
    chunks s, s + stages, ..., as Megatron's interleaved schedule); it has a
    forward and a backward function (one micro-batch each) and covers the
    listed units of the model (`embedding`, the transformer blocks, `head`:
    the final norm, LM head and loss). Each stage has its optimizer-update
    function and its ordered list of actions: `F3` is the forward of
    micro-batch 3 and `B3` its backward; with `virtual` > 1, `F3.1` names
    the stage's local chunk 1 (global chunk 1 * stages + stage).

    The verifier checks the structure (every stage runs the forward and the
    backward of each of its chunks on every micro-batch exactly once, the
    forward first); `--loom-pipeline` and `--loom-pipeline-report` also
    simulate the sends and receives of the functions in this order and
    reject a schedule that deadlocks or mismatches them.

    A forward-only pipeline (an evaluation, `--loom-pipeline=forward-only`)
    has no `backward` functions, no `update` functions and only forward
    actions, each chunk and micro-batch once.

    ```mlir
    loom.pipeline_schedule "1f1b" stages 2 virtual 1 microbatches 4 {
      chunk 0 ["embedding", "h.0"] forward @gpt2_fwd0 backward @gpt2_bwd0
      chunk 1 ["h.1", "head"] forward @gpt2_fwd1 backward @gpt2_bwd1
      stage 0 update @gpt2_update_stage0 : F0 F1 B0 F2 B1 F3 B2 B3
      stage 1 update @gpt2_update_stage1 : F0 B0 F1 B1 F2 B2 F3 B3
    }
    ```
  }];
  let arguments = (ins StrAttr:$schedule, I64Attr:$stages, I64Attr:$virtual_stages,
                       I64Attr:$microbatches,
                       FlatSymbolRefArrayAttr:$forward,
                       FlatSymbolRefArrayAttr:$backward,
                       FlatSymbolRefArrayAttr:$update,
                       ArrayAttr:$units,
                       ArrayAttr:$actions);
  let hasCustomAssemblyFormat = 1;
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Number of model chunks (stages x virtual).
    int64_t getNumChunks() { return getStages() * getVirtualStages(); }
    /// An evaluation's pipeline: forward functions and actions only.
    bool isForwardOnly() { return getBackward().empty(); }
  }];
}

def Loom_GroupAllReduceOp : Loom_CollectiveOp<"group_all_reduce", [Pure,
    AllTypesMatch<["input", "result"]>]> {
  let summary = "All-reduce among some coordinates of one mesh axis";
  let description = [{
    The devices whose coordinate on the single axis named is one of
    `members` (all other coordinates equal) reduce `input`; devices outside
    the members do not take part. Megatron's embedding group: GPT-2's tied
    `wte` lives on the first and the last pipeline stage, and the two
    gradient contributions are summed between them once per step.

    ```mlir
    %g = loom.group_all_reduce %wte_grad on @mesh [pp] members [0, 3] sum
        {reason = "tied wte.weight: sum the gradients of stages 0 and 3"}
        : tensor<50257x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, DenseI64ArrayAttr:$members,
                       Loom_ReductionKindAttr:$reduction,
                       OptionalAttr<StrAttr>:$reason);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh custom<MeshAxes>($axes) `members` $members
    custom<Reduction>($reduction) attr-dict `:` type($input)
  }];
}

#endif // LOOM_DIALECT_LOOM_IR_LOOMPIPELINEOPS_TD
