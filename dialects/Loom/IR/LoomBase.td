//===- LoomBase.td - Loom dialect, enums and attributes ----*- tablegen -*-===//
//
// The `loom` dialect holds a training graph (parameters, forward ops, loss)
// and everything the partitioner needs to say about it: the device mesh,
// per-value shardings, and the collectives it inserts.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECT_LOOM_IR_LOOMBASE_TD
#define LOOM_DIALECT_LOOM_IR_LOOMBASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Dialect
//===----------------------------------------------------------------------===//

def Loom_Dialect : Dialect {
  let name = "loom";
  let cppNamespace = "::mlir::loom";
  let summary = "Training graphs and their partitioning over a device mesh";
  let description = [{
    A model is a `func.func` whose arguments are parameters, inputs and
    targets (tagged with `loom.name`, `loom.role`, `loom.init`) and whose
    result is the scalar loss. Transformer blocks are explicit `loom.block`
    regions. A `loom.mesh` symbol names the device mesh; `loom.sharding`
    attributes on values say how each is split over the mesh axes; the
    collectives (`loom.all_reduce`, ...) name the axes they run over.

    Discardable attributes the dialect verifies:
    * on function arguments: `loom.name` (string), `loom.role`
      (`#loom.role<param|input|target>`, or the training state autodiff and
      mixed precision add: `grad`, `adam_m`, `adam_v`, `master`, `lr`,
      `step`), `loom.init` (`#loom.init<...>`),
      `loom.sharding` (`#loom.sharding<...>`), `loom.checkpoint_shape`
      (`array<i64: ...>`, a param's shape in checkpoints when its type groups
      the same row-major elements otherwise, as GPT-2's c_attn `[C, 3, C]`
      saved as HF's `[C, 3C]`), `loom.unpadded_rows` (i64, a param whose
      first dimension is padded at its end, as a vocabulary padded for
      tensor parallelism: its real row count, the rows checkpoints hold);
    * on functions: `loom.model` (dictionary of the model configuration);
    * on ops: `loom.shardings` (one `#loom.sharding` per result).

    Buffer planning (`--loom-plan-buffers`) adds `loom.offset` (arguments),
    `loom.offsets` / `loom.scratch_offsets` (ops) and `loom.arena_bytes`
    (functions): byte offsets in the rank's arena.
  }];
  let dependentDialects = ["::mlir::func::FuncDialect"];
  let useDefaultAttributePrinterParser = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    /// Names of the discardable attributes this dialect owns.
    static constexpr ::llvm::StringLiteral kNameAttr = "loom.name";
    static constexpr ::llvm::StringLiteral kRoleAttr = "loom.role";
    static constexpr ::llvm::StringLiteral kInitAttr = "loom.init";
    static constexpr ::llvm::StringLiteral kShardingAttr = "loom.sharding";
    static constexpr ::llvm::StringLiteral kShardingsAttr = "loom.shardings";
    static constexpr ::llvm::StringLiteral kModelAttr = "loom.model";
    /// On a param whose type regroups the dimensions of its HF tensor (GPT-2's
    /// c_attn as [C, 3, C] for HF's [C, 3C]): the shape checkpoints hold.
    static constexpr ::llvm::StringLiteral kCheckpointShapeAttr =
        "loom.checkpoint_shape";
    /// On a param padded at the end of its first dimension (a vocabulary
    /// padded by --loom-tensor-parallel): its real row count. The padding
    /// rows start at zero, never train, and are left out of checkpoints.
    static constexpr ::llvm::StringLiteral kUnpaddedRowsAttr =
        "loom.unpadded_rows";
    // Written by --loom-plan-buffers, read by the program emitter.
    static constexpr ::llvm::StringLiteral kOffsetAttr = "loom.offset";
    static constexpr ::llvm::StringLiteral kOffsetsAttr = "loom.offsets";
    static constexpr ::llvm::StringLiteral kScratchOffsetsAttr =
        "loom.scratch_offsets";
    static constexpr ::llvm::StringLiteral kArenaBytesAttr = "loom.arena_bytes";
    /// On an op of a pipeline forward: one flag per result, set where the
    /// result's loom.offsets entry is an offset in the chunk's stash slot
    /// (what the forward keeps for its backward, written there in place),
    /// not in the arena. A backward's stash arguments' loom.offset is
    /// always a slot offset.
    static constexpr ::llvm::StringLiteral kInStashAttr = "loom.in_stash";
    /// On a pipeline forward function: the bytes of its chunk's stash slot
    /// (one per micro-batch in flight).
    static constexpr ::llvm::StringLiteral kStashBytesAttr = "loom.stash_bytes";
    // Written by --loom-autodiff.
    /// On a function result: the index of the argument whose storage it
    /// updates in place (gradient accumulators, optimizer state).
    static constexpr ::llvm::StringLiteral kUpdatesAttr = "loom.updates";
    /// On a function: {phase = "microbatch"|"update", microbatches = M}.
    static constexpr ::llvm::StringLiteral kTrainAttr = "loom.train";
    // Written by --loom-partition: the function has per-rank (local)
    // shapes; its arguments' loom.sharding still describe the global layout.
    static constexpr ::llvm::StringLiteral kPartitionedAttr = "loom.partitioned";
    // Written by --loom-pipeline.
    /// On a stage function: {stage = S, chunk = K} (chunk K of the model on
    /// pipeline stage S); its loom.train phase is "forward", "backward" or
    /// "update".
    static constexpr ::llvm::StringLiteral kPipelineAttr = "loom.pipeline";
    /// On a forward function's result: the loom.name of the backward
    /// function's `stash` argument that receives it.
    static constexpr ::llvm::StringLiteral kStashAttr = "loom.stash";
    /// On a loom.pipeline_schedule: {peak_tflops = F, bandwidth_gbs = F},
    /// the machine the cut was balanced for, which the program's predicted
    /// timeline uses too.
    static constexpr ::llvm::StringLiteral kCostModelAttr = "loom.cost_model";

  private:
    void registerAttributes();
  }];
}

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Loom_Role : I32EnumAttr<"Role", "what a function argument is", [
  I32EnumAttrCase<"Param", 0, "param">,
  I32EnumAttrCase<"Input", 1, "input">,
  I32EnumAttrCase<"Target", 2, "target">,
  // Training state, named after the parameter it belongs to.
  I32EnumAttrCase<"Grad", 3, "grad">,
  I32EnumAttrCase<"AdamM", 4, "adam_m">,
  I32EnumAttrCase<"AdamV", 5, "adam_v">,
  // Scalars the runtime sets each step.
  I32EnumAttrCase<"LearningRate", 6, "lr">,
  I32EnumAttrCase<"Step", 7, "step">,
  // Pipeline: an activation the forward of a stage keeps for its backward
  // (one copy per micro-batch in flight).
  I32EnumAttrCase<"Stash", 8, "stash">,
  // Mixed precision (--loom-mixed-precision): the fp32 master weights of a
  // parameter whose `param` copy is bf16. The update function's AdamW
  // updates the master and casts it into the parameter; sharded like the
  // AdamW moments (ZeRO-1/2/3).
  I32EnumAttrCase<"Master", 9, "master">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::loom";
}

def Loom_InitKind : I32EnumAttr<"InitKind", "parameter initializer", [
  I32EnumAttrCase<"Normal", 0, "normal">,
  I32EnumAttrCase<"Zeros", 1, "zeros">,
  I32EnumAttrCase<"Ones", 2, "ones">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::loom";
}

def Loom_ReductionKind : I32EnumAttr<"ReductionKind",
    "how a collective combines the values of a group", [
  I32EnumAttrCase<"Sum", 0, "sum">,
  I32EnumAttrCase<"Max", 1, "max">,
  I32EnumAttrCase<"Min", 2, "min">,
  I32EnumAttrCase<"Avg", 3, "avg">
]> {
  let genSpecializedAttr = 0;
  let cppNamespace = "::mlir::loom";
}

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Loom_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Loom_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Loom_RoleAttr : EnumAttr<Loom_Dialect, Loom_Role, "role"> {
  let assemblyFormat = "`<` $value `>`";
}

def Loom_ReductionKindAttr
    : EnumAttr<Loom_Dialect, Loom_ReductionKind, "reduction"> {
  let assemblyFormat = "$value";
}

def Loom_InitAttr : Loom_Attr<"Init", "init"> {
  let summary = "How a parameter is initialized";
  let description = [{
    GPT-2 initialization: `normal` with a standard deviation (0.02, or
    0.02/sqrt(2·n_layer) for residual projections), `zeros` for biases,
    `ones` for layer-norm weights. Values depend only on the run seed, the
    parameter name and the global element index, so every partitioning of
    the same model starts from the same weights.

    ```mlir
    #loom.init<normal, std = 0.02>
    #loom.init<zeros>
    ```
  }];
  let parameters = (ins
    EnumParameter<Loom_InitKind>:$kind,
    APFloatParameter<"standard deviation (normal only)">:$std
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
}

def Loom_MeshAttr : Loom_Attr<"Mesh", "mesh"> {
  let summary = "The axes of a device mesh and their sizes";
  let description = [{
    An ordered list of named axes; the device count is the product of the
    sizes. The first axis varies slowest in the rank order.

    ```mlir
    #loom.mesh<dp = 2, tp = 4, pp = 2>
    ```
  }];
  let parameters = (ins
    ArrayRefParameter<"::mlir::StringAttr">:$axisNames,
    ArrayRefParameter<"int64_t">:$axisSizes
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of devices in the mesh (product of the axis sizes).
    int64_t getNumDevices() const;
    /// Position of `axis` in the mesh, or std::nullopt when it is unknown.
    std::optional<unsigned> findAxis(::llvm::StringRef axis) const;
    /// Comma-separated axis names, for diagnostics.
    std::string axisNamesForDiagnostic() const;
  }];
}

def Loom_ShardingAttr : Loom_Attr<"Sharding", "sharding"> {
  let summary = "How one tensor value is laid out over a mesh";
  let description = [{
    For each tensor dimension, the mesh axes that split it (majors first);
    plus the axes over which the local values are partial results still to
    be reduced: partial sums, or with `partial max`, partial maxima (each
    rank's maximum over its shard, as a vocab-parallel loss's row maximum).
    An axis that appears nowhere means the value is replicated over it.

    ```mlir
    // Column-parallel weight on tp, replicated on dp:
    #loom.sharding<@mesh, [[], [tp]]>
    // Row-parallel matmul output before its all-reduce:
    #loom.sharding<@mesh, [[dp], [], []], partial = [tp]>
    // Row maxima of logits split on the vocabulary over tp:
    #loom.sharding<@mesh, [[dp], []], partial max = [tp]>
    ```
  }];
  let parameters = (ins
    "::mlir::FlatSymbolRefAttr":$mesh,
    "::mlir::ArrayAttr":$dims,
    "::mlir::ArrayAttr":$partial,
    "::mlir::loom::ReductionKind":$partialKind
  );
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "::mlir::FlatSymbolRefAttr":$mesh,
                     "::mlir::ArrayAttr":$dims, "::mlir::ArrayAttr":$partial,
                     CArg<"::mlir::loom::ReductionKind",
                          "::mlir::loom::ReductionKind::Sum">:$partialKind), [{
      return $_get($_ctxt, mesh, dims, partial, partialKind);
    }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Rank of the tensor this sharding describes.
    unsigned getRank() const { return getDims().size(); }
    /// The mesh axes that split dimension `dim`, major first.
    ::llvm::SmallVector<::llvm::StringRef> getDimAxes(unsigned dim) const;
    /// The axes over which values are partial sums.
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxes() const;
  }];
}

#endif // LOOM_DIALECT_LOOM_IR_LOOMBASE_TD
