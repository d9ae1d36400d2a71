//===- LoomOps.td - Graph, structure, collective ops -------*- tablegen -*-===//
//
// Three groups: the mesh symbol; the training-graph ops of a GPT model
// (compute, shape, block structure); and the collectives the partitioner
// inserts. Shapes are static: the buffer planner needs them.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECT_LOOM_IR_LOOMOPS_TD
#define LOOM_DIALECT_LOOM_IR_LOOMOPS_TD

include "dialects/Loom/IR/LoomBase.td"
include "dialects/Loom/IR/LoomInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/RegionKindInterface.td"
include "mlir/IR/CommonTypeConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"

class Loom_Op<string mnemonic, list<Trait> traits = []>
    : Op<Loom_Dialect, mnemonic, traits>;

def Loom_FloatTensor : StaticShapeTensorOf<[AnyFloat]>;
def Loom_IndexTensor : StaticShapeTensorOf<[I32]>;
def Loom_ScalarFloatTensor : 0DTensorOf<[AnyFloat]>;
def Loom_ScalarF32Tensor : 0DTensorOf<[F32]>;
def Loom_F32Tensor : StaticShapeTensorOf<[F32]>;

/// A compute op of the training graph: pure, with a cost and a sharding
/// rule.
class Loom_ComputeOp<string mnemonic, list<Trait> traits = []>
    : Loom_Op<mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<Loom_CostOpInterface>,
        DeclareOpInterfaceMethods<Loom_ShardingRuleOpInterface>])> {
  let hasVerifier = 1;
}

/// A forward compute op with a gradient rule (GradientOpInterface).
class Loom_DifferentiableOp<string mnemonic, list<Trait> traits = []>
    : Loom_ComputeOp<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<Loom_GradientOpInterface>])>;

//===----------------------------------------------------------------------===//
// Mesh
//===----------------------------------------------------------------------===//

def Loom_MeshOp : Loom_Op<"mesh", [Symbol, HasParent<"::mlir::ModuleOp">]> {
  let summary = "A named device mesh";
  let description = [{
    Declares the mesh that shardings and collectives refer to by name.

    ```mlir
    loom.mesh @mesh <dp = 2, tp = 4, pp = 2>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Loom_MeshAttr:$shape);
  let assemblyFormat = "$sym_name $shape attr-dict";
}

//===----------------------------------------------------------------------===//
// Compute ops
//===----------------------------------------------------------------------===//

def Loom_EmbeddingOp : Loom_DifferentiableOp<"embedding"> {
  let summary = "Row lookup in an embedding table";
  let description = [{
    `result[i..., :] = table[ids[i...], :]`. GPT-2 ties this table with the
    LM head (`loom.matmul ... transpose_rhs`), so one parameter feeds both.

    When the partitioner splits the table's rows over mesh axes (Megatron's
    vocab-parallel embedding) it names them in `row_axes`: a rank holding
    rows `[b·R, (b+1)·R)` (b its block index on the axes, R its rows) looks
    up the ids in that range and writes zeros for the others, so the ranks'
    results are partial sums of the lookup.

    ```mlir
    %x = loom.embedding %wte, %ids
        : tensor<50257x768xf32>, tensor<4x64xi32> -> tensor<4x64x768xf32>
    %p = loom.embedding %wte_shard, %ids {row_axes = ["tp"]}
        : tensor<128x64xf32>, tensor<4x64xi32> -> tensor<4x64x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$table, Loom_IndexTensor:$ids,
                       OptionalAttr<StrArrayAttr>:$row_axes);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids attr-dict `:` type($table) `,` type($ids) `->` type($result)
  }];
}

def Loom_AddOp : Loom_DifferentiableOp<"add", [AllTypesMatch<["lhs", "result"]>]> {
  let summary = "Elementwise addition with trailing broadcast of the rhs";
  let description = [{
    The rhs shape must equal a trailing part of the lhs shape (the rhs is
    repeated over the leading dimensions), as when a `[T, C]` position
    embedding is added to `[B, T, C]` token embeddings.

    ```mlir
    %y = loom.add %x, %pos : tensor<4x64x768xf32>, tensor<64x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$lhs, Loom_FloatTensor:$rhs);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)";
}

def Loom_LinearOp : Loom_DifferentiableOp<"linear"> {
  let summary = "x·W + b with W laid out [in, out] (HF GPT-2 Conv1D)";
  let description = [{
    Contracts the last dimension of the input with the first of the
    weight; the optional bias is added along the output dimensions. The
    weight may have several output dimensions (`[in, out...]`, as flax's
    DenseGeneral): GPT-2's c_attn is `[C, 3, C]`, the bytes of HF's packed
    `[C, 3C]` with q, k and v as a dimension, so that attention heads are a
    plain split of the last one.

    ```mlir
    %y = loom.linear %x, %w, %b : tensor<4x64x768xf32>, tensor<768x3072xf32>,
        tensor<3072xf32> -> tensor<4x64x3072xf32>
    %qkv = loom.linear %x, %wa, %ba : tensor<4x64x768xf32>,
        tensor<768x3x768xf32>, tensor<3x768xf32> -> tensor<4x64x3x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_FloatTensor:$weight,
                       Optional<Loom_FloatTensor>:$bias);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)? `->` type($result)
  }];
}

def Loom_MatmulOp : Loom_DifferentiableOp<"matmul"> {
  let summary = "Matrix product, optionally with the rhs transposed";
  let description = [{
    `lhs` is `[..., M, K]`, `rhs` is `[K, N]` (or `[N, K]` with
    `transpose_rhs`), the result `[..., M, N]`. GPT-2's LM head is
    `matmul %h, %wte transpose_rhs` on the tied token embedding.

    ```mlir
    %logits = loom.matmul %h, %wte transpose_rhs
        : tensor<4x64x768xf32>, tensor<50257x768xf32> -> tensor<4x64x50257xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$lhs, Loom_FloatTensor:$rhs,
                       UnitAttr:$transpose_rhs);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs (`transpose_rhs` $transpose_rhs^)? attr-dict `:`
    type($lhs) `,` type($rhs) `->` type($result)
  }];
}

def Loom_LayerNormOp : Loom_DifferentiableOp<"layer_norm",
    [AllTypesMatch<["input", "result"]>]> {
  let summary = "Layer normalization over the last dimension";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias`, with mean and
    (biased) variance over the last dimension; weight and bias have the size
    of that dimension.

    ```mlir
    %y = loom.layer_norm %x, %w, %b {epsilon = 1.0e-05 : f64}
        : tensor<4x64x768xf32>, tensor<768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, Loom_FloatTensor:$weight,
                       Loom_FloatTensor:$bias,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight `,` $bias attr-dict `:` type($input) `,`
    type($weight) `,` type($bias)
  }];
}

def Loom_GeluOp : Loom_DifferentiableOp<"gelu",
    [SameOperandsAndResultType]> {
  let summary = "GELU, tanh approximation (GPT-2)";
  let description = [{
    `0.5·x·(1 + tanh(sqrt(2/π)·(x + 0.044715·x³)))`.

    ```mlir
    %y = loom.gelu %x : tensor<4x64x3072xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Loom_AttentionOp : Loom_DifferentiableOp<"attention"> {
  let summary = "Causal multi-head self-attention on packed q|k|v";
  let description = [{
    The input is `[B, T, 3C]`: queries, keys and values of C channels each,
    laid out as GPT-2's `c_attn` produces them, or the same bytes as
    `[B, T, 3, C]`; C is split into `num_heads` heads. Each position attends
    to itself and earlier positions, scores scaled by 1/sqrt(C/num_heads).
    The result is `[B, T, C]`. In the `[B, T, 3, C]` form the channels may be
    split across ranks in whole heads (tensor parallelism); the partitioner
    then sets `num_heads` to the heads each rank holds.

    The optional second result `lse` is `[B, num_heads, T]` f32 (whatever
    the compute precision): the natural-log log-sum-exp of each query row's
    scaled scores, which a tiled (flash) kernel keeps anyway. The training
    step asks for it (--loom-autodiff) so that `loom.attention_grad` can
    rebuild the probabilities from q, k and lse without re-running the
    forward, as FlashAttention-2's backward does.

    ```mlir
    %y = loom.attention %qkv {num_heads = 12 : i64}
        : tensor<4x64x2304xf32> -> tensor<4x64x768xf32>
    %y, %lse = loom.attention %qkv {num_heads = 12 : i64}
        : tensor<4x64x3x768xbf16> -> tensor<4x64x768xbf16>, tensor<4x12x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$qkv, I64Attr:$num_heads);
  let results = (outs Loom_FloatTensor:$result, Optional<Loom_F32Tensor>:$lse);
  let assemblyFormat = [{
    $qkv attr-dict `:` type($qkv) `->` type($result) (`,` type($lse)^)?
  }];
}

def Loom_SoftmaxOp : Loom_DifferentiableOp<"softmax", [SameOperandsAndResultType]> {
  let summary = "Softmax over the last dimension";
  let description = [{
    ```mlir
    %p = loom.softmax %x : tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input)";
}

def Loom_CrossEntropyOp : Loom_DifferentiableOp<"cross_entropy",
    [Loom_VocabMaskOpInterface]> {
  let summary = "Softmax cross-entropy, mean over all tokens";
  let description = [{
    `logits` is `[..., V]`, `targets` has the leading shape of `logits`;
    the result is the scalar mean over all tokens of
    `-log softmax(logits)[target]`. When the tokens are split across ranks
    the partitioner sets `num_tokens` to the global count, so each rank's
    result is its share of the global mean (partial sums add up to it).
    With `vocab_size` (set by vocabulary padding) the columns from that
    index on are padding: they stay out of the softmax.

    ```mlir
    %loss = loom.cross_entropy %logits, %targets {vocab_size = 50257 : i64}
        : tensor<4x64x50304xf32>, tensor<4x64xi32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$logits, Loom_IndexTensor:$targets,
                       OptionalAttr<I64Attr>:$num_tokens,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Loom_ScalarFloatTensor:$result);
  let assemblyFormat = [{
    $logits `,` $targets attr-dict `:` type($logits) `,` type($targets)
    `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Vocab-parallel loss
//===----------------------------------------------------------------------===//

// `loom.cross_entropy` split into the three steps of Megatron's
// vocab-parallel cross-entropy, each an op with a sharding rule, so that
// logits split on the vocabulary are never gathered: a row maximum (partial
// maxima over the vocabulary shards), the sums of exp(logit - max) and the
// target logits (partial sums: a shard without the target adds 0), and the
// mean of log(sum) + max - target logit. --loom-tensor-parallel lowers the
// loss to these ops (and its gradient to `loom.cross_entropy_sums_grad`)
// when it splits the vocabulary.

def Loom_RowMaxOp : Loom_ComputeOp<"row_max",
    [DeclareOpInterfaceMethods<Loom_VocabMaskOpInterface, ["getMaskedLogits"]>]> {
  let summary = "Maximum over the last dimension";
  let description = [{
    `result[i...] = max_v input[i..., v]`. Split over the last dimension,
    each rank's result is its shard's maximum: a partial maximum
    (`partial max`), combined by an all-reduce max. With `vocab_size` the
    columns from that global index on are vocabulary padding
    (--loom-tensor-parallel's `vocab-divisible-by`) and take no part; a
    rank holding only padding gives -inf. `vocab_axes` (set by the
    partitioner, as for `loom.cross_entropy_sums`) name the axes splitting
    the columns, so the kernel finds its shard's global offset.

    ```mlir
    %m = loom.row_max %logits {vocab_size = 50257 : i64}
        : tensor<4x64x50304xf32> -> tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input,
                       OptionalAttr<StrArrayAttr>:$vocab_axes,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Loom_CrossEntropySumsOp : Loom_ComputeOp<"cross_entropy_sums",
    [Loom_VocabMaskOpInterface]> {
  let summary = "Sums of exp(logit - max) and the target logits, per token";
  let description = [{
    `sum_exp[i...] = Σ_v exp(logits[i..., v] - row_max[i...])` and
    `target_logit[i...] = logits[i..., targets[i...]]`. When the
    partitioner splits the vocabulary over mesh axes it names them in
    `vocab_axes`: a rank holding columns `[b·V, (b+1)·V)` (b its block index
    on the axes) sums its columns and contributes 0 as the target logit of a
    token whose target is elsewhere, so both results are partial sums.
    With `vocab_size`, columns from that global index on are vocabulary
    padding: left out of `sum_exp` (as `loom.row_max` leaves them out of the
    maximum), so the loss is the unpadded vocabulary's.

    ```mlir
    %s, %t = loom.cross_entropy_sums %logits, %m, %targets
        : tensor<4x64x256xf32>, tensor<4x64xf32>, tensor<4x64xi32>
        -> tensor<4x64xf32>, tensor<4x64xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$logits, Loom_FloatTensor:$row_max,
                       Loom_IndexTensor:$targets,
                       OptionalAttr<StrArrayAttr>:$vocab_axes,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Loom_FloatTensor:$sum_exp,
                      Loom_FloatTensor:$target_logit);
  let assemblyFormat = [{
    $logits `,` $row_max `,` $targets attr-dict `:` type($logits) `,`
    type($row_max) `,` type($targets) `->` type($sum_exp) `,`
    type($target_logit)
  }];
}

def Loom_CrossEntropyFromSumsOp : Loom_ComputeOp<"cross_entropy_from_sums"> {
  let summary = "Mean cross-entropy from per-token maxima and sums";
  let description = [{
    The scalar mean over tokens of `log(sum_exp) + row_max - target_logit`
    (= -log softmax(logits)[target]); over `num_tokens` tokens when set (the
    global count of tokens split across ranks), as `loom.cross_entropy`.

    ```mlir
    %loss = loom.cross_entropy_from_sums %m, %s, %t
        : tensor<4x64xf32>, tensor<4x64xf32>, tensor<4x64xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$row_max, Loom_FloatTensor:$sum_exp,
                       Loom_FloatTensor:$target_logit,
                       OptionalAttr<I64Attr>:$num_tokens);
  let results = (outs Loom_ScalarFloatTensor:$result);
  let assemblyFormat = [{
    $row_max `,` $sum_exp `,` $target_logit attr-dict `:` type($row_max) `,`
    type($sum_exp) `,` type($target_logit) `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Shape ops
//===----------------------------------------------------------------------===//

def Loom_ReshapeOp : Loom_DifferentiableOp<"reshape"> {
  let summary = "Reinterpret a tensor with another shape of equal size";
  let description = [{
    ```mlir
    %y = loom.reshape %x : tensor<4x64x768xf32> -> tensor<256x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Loom_TransposeOp : Loom_DifferentiableOp<"transpose"> {
  let summary = "Permute the dimensions of a tensor";
  let description = [{
    Result dimension i is input dimension `permutation[i]`.

    ```mlir
    %y = loom.transpose %x [1, 0] : tensor<768x3072xf32> -> tensor<3072x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input,
                       DenseI64ArrayAttr:$permutation);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input $permutation attr-dict `:` type($input) `->` type($result)
  }];
}

def Loom_SliceOp : Loom_DifferentiableOp<"slice"> {
  let summary = "A contiguous range of one dimension";
  let description = [{
    Takes `[offset, offset + n)` of dimension `dim`, n being the result's
    size there; every other dimension is kept whole. GPT-2 uses it to take
    the first T rows of the position embedding.

    ```mlir
    %p = loom.slice %wpe dim 0 offset 0
        : tensor<1024x768xf32> -> tensor<64x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, I64Attr:$dim,
                       I64Attr:$offset);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `dim` $dim `offset` $offset attr-dict `:` type($input) `->`
    type($result)
  }];
}

def Loom_ConcatOp : Loom_DifferentiableOp<"concat"> {
  let summary = "Concatenate tensors along one dimension";
  let description = [{
    ```mlir
    %y = loom.concat %a, %b dim 1
        : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x16xf32>
    ```
  }];
  let arguments = (ins Variadic<Loom_FloatTensor>:$inputs, I64Attr:$dim);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $inputs `dim` $dim attr-dict `:` `(` type($inputs) `)` `->` type($result)
  }];
}

//===----------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------===//

def Loom_CastOp : Loom_DifferentiableOp<"cast"> {
  let summary = "Convert a tensor between f32 and bf16";
  let description = [{
    Same shape, the other element type: f32 -> bf16 rounds to nearest even,
    bf16 -> f32 is exact. `--loom-mixed-precision` casts each parameter's
    updated fp32 master weights into the bf16 copy the forward and backward
    read. Elementwise, so it shards like its operand (under ZeRO-1/2 each
    rank casts its shard of the master, then the bf16 parameter is
    all-gathered: half of fp32's bytes). Its gradient is the cast back.

    ```mlir
    %w = loom.cast %master : tensor<768x3072xf32> -> tensor<768x3072xbf16>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let extraClassDeclaration = [{
    /// bf16 -> f32: exact, so it commutes with sums (a partial sum may be
    /// reduced after it).
    bool isWidening() {
      return getInput().getType().getElementType().getIntOrFloatBitWidth() <
             getResult().getType().getElementType().getIntOrFloatBitWidth();
    }
  }];
}

//===----------------------------------------------------------------------===//
// Structure
//===----------------------------------------------------------------------===//

def Loom_BlockOp : Loom_Op<"block", [IsolatedFromAbove, RecursiveMemoryEffects,
    SingleBlock, DeclareOpInterfaceMethods<Loom_CostOpInterface>]> {
  let summary = "A transformer block: unit of ZeRO-3 gather, pipeline cut, recompute";
  let description = [{
    An isolated region whose operands are everything the block reads: its
    input activation(s) and the parameters it owns. The entry block's
    arguments mirror the operands; `loom.yield` returns the results. ZeRO-3
    gathers exactly the parameter operands before the block and frees them
    after it; a pipeline stage is a range of blocks; recomputation re-runs a
    block's body.

    ```mlir
    %y = loom.block "h.0" (%x, %w, %b) : (tensor<4x64x768xf32>,
        tensor<768xf32>, tensor<768xf32>) -> tensor<4x64x768xf32> {
    ^bb0(%ax: tensor<4x64x768xf32>, %aw: tensor<768xf32>, %ab: tensor<768xf32>):
      %n = loom.layer_norm %ax, %aw, %ab : tensor<4x64x768xf32>,
          tensor<768xf32>, tensor<768xf32>
      loom.yield %n : tensor<4x64x768xf32>
    }
    ```
  }];
  let arguments = (ins StrAttr:$label, Variadic<AnyRankedTensor>:$inputs);
  let results = (outs Variadic<AnyRankedTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    $label `(` $inputs `)` attr-dict `:` functional-type($inputs, $results)
    $body
  }];
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The terminator of the body.
    YieldOp getYield();
  }];
}

def Loom_YieldOp : Loom_Op<"yield", [Pure, Terminator, ReturnLike,
    HasParent<"BlockOp">]> {
  let summary = "Returns the results of a loom.block";
  let description = [{
    ```mlir
    loom.yield %y : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

/// A collective over the devices that differ only in the coordinates of
/// `axes` on mesh `mesh`. `reason` records why the partitioner put it there.
class Loom_CollectiveOp<string mnemonic, list<Trait> traits = []>
    : Loom_Op<mnemonic, !listconcat(traits,
        [DeclareOpInterfaceMethods<SymbolUserOpInterface>])> {
  code extraCollectiveDeclaration = [{
    /// Number of devices in the group (product of the sizes of `axes`),
    /// or std::nullopt when the mesh or an axis cannot be found.
    std::optional<int64_t> getGroupSize();
  }];
  let extraClassDeclaration = extraCollectiveDeclaration;
}

def Loom_AllReduceOp : Loom_CollectiveOp<"all_reduce", [Pure,
    DeclareOpInterfaceMethods<InferTypeOpInterface>]> {
  let summary = "Reduce values over a group; every member gets the results";
  let description = [{
    One collective over one or more values (a gradient bucket, as DDP's
    bucketed all-reduce): result i is the reduction of input i. Several
    inputs travel as one buffer, counted as one collective of their total
    size.

    With `async`, the runtime launches the reduction and runs the following
    instructions while it is in flight, completing it before the first
    instruction that reads one of its results (DDP's overlap of gradient
    buckets with the rest of backward). `--loom-schedule-comm` forms the
    buckets and places each right after its last input is produced.

    With `last_microbatch` (only in a training step's micro-batch function)
    the reduction runs in the step's last micro-batch alone and is the
    identity in the others: PyTorch DDP's `no_sync` over the first M-1
    micro-batches, whose gradients accumulate locally, and one reduction of
    the accumulated sum in the last, overlapped with its backward. Each
    result lives in its input's storage (the runtime reduces in place, so
    a skipped reduction leaves the accumulated value where its result is
    read); `--loom-partition` places these on a DDP step's gradient
    accumulators.

    ```mlir
    %y = loom.all_reduce %x on @mesh [tp] sum {reason = "row-parallel c_proj"}
        : tensor<4x64x768xf32>
    %gw, %gb = loom.all_reduce %w, %b on @mesh [dp] sum async
        {reason = "gradient bucket 0 (2 tensors)"}
        : tensor<768x3072xf32>, tensor<3072xf32>
    %acc = loom.all_reduce %sum on @mesh [dp] sum last_microbatch
        {reason = "wte.weight: the micro-batches' local gradients summed"}
        : tensor<256x64xf32>
    ```
  }];
  let arguments = (ins Variadic<Loom_FloatTensor>:$inputs,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       Loom_ReductionKindAttr:$reduction, UnitAttr:$async,
                       OptionalAttr<StrAttr>:$reason,
                       UnitAttr:$last_microbatch);
  let results = (outs Variadic<Loom_FloatTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $mesh custom<MeshAxes>($axes) custom<Reduction>($reduction)
    (`last_microbatch` $last_microbatch^)? (`async` $async^)? attr-dict `:`
    type($inputs)
  }];
  let builders = [
    // One value, reduced synchronously (what the partitioner inserts).
    OpBuilder<(ins "Value":$input, "FlatSymbolRefAttr":$mesh,
                   "ArrayAttr":$axes, "ReductionKindAttr":$reduction,
                   "StringAttr":$reason), [{
      build($_builder, $_state, TypeRange{input.getType()}, ValueRange{input},
            mesh, axes, reduction, /*async=*/UnitAttr(), reason);
    }]>
  ];
  let extraClassDeclaration = extraCollectiveDeclaration # [{
    /// The single input / result of a one-value all-reduce.
    Value getInput() { return getInputs().front(); }
    Value getResult() { return getResults().front(); }
  }];
  let hasVerifier = 1;
}

def Loom_AllGatherOp : Loom_CollectiveOp<"all_gather", [Pure]> {
  let summary = "Concatenate the group's shards along one dimension";
  let description = [{
    The result's `dim` is the input's times the group size; the other
    dimensions are equal. With `async` the runtime runs the following
    instructions while the gather is in flight and completes it before the
    first instruction that touches its input or result (ZeRO-3's prefetch
    of the next block's parameters, placed by `--loom-schedule-comm`).
    Gathered on a non-leading dimension (GPT-2's wte on its columns when
    dp does not divide its 50257 rows), the ranks' blocks arrive in a
    buffer `--loom-plan-buffers` plans, then are unpacked into the result.

    Several inputs (a bucket: FSDP gathers a block's parameters with one
    collective) travel as one: result i is input i gathered along its own
    dimension (`dim d` when every member's is d, `dims [d0, d1, ...]`
    otherwise). The members share one element type; the runtime packs the
    shards into one buffer, gathers every member's shards at once and
    unpacks each result from them. `--loom-schedule-comm` forms these
    buckets from ZeRO-3's gathers of a block's parameters (GPT-2's
    `c_attn.bias`, `[3, C]`, is split on dim 1, the rest on dim 0: one
    bucket still holds them all, as FSDP's flat parameter does).

    ```mlir
    %w = loom.all_gather %shard on @mesh [dp] dim 0
        {reason = "zero-3: gather h.0.mlp.c_fc.weight for forward"}
        : tensor<96x3072xf32> -> tensor<768x3072xf32>
    %fw, %fb = loom.all_gather %w8, %b8 on @mesh [dp] dim 0 async
        {reason = "all-gather bucket 0: 2 parameters"}
        : tensor<96x3072xf32>, tensor<384xf32>
        -> tensor<768x3072xf32>, tensor<3072xf32>
    %pw, %qb = loom.all_gather %w8, %qkv8 on @mesh [dp] dims [0, 1]
        : tensor<96x3072xf32>, tensor<3x96xf32>
        -> tensor<768x3072xf32>, tensor<3x768xf32>
    ```
  }];
  let arguments = (ins Variadic<Loom_FloatTensor>:$inputs,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$dims, UnitAttr:$async,
                       OptionalAttr<StrAttr>:$reason);
  let results = (outs Variadic<Loom_FloatTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $mesh custom<MeshAxes>($axes) custom<MemberDims>(ref($inputs), $dims)
    (`async` $async^)? attr-dict `:` type($inputs) `->` type($results)
  }];
  let builders = [
    // One value (what the partitioner inserts).
    OpBuilder<(ins "Type":$result, "Value":$input, "FlatSymbolRefAttr":$mesh,
                   "ArrayAttr":$axes, "int64_t":$dim, "UnitAttr":$async,
                   "StringAttr":$reason), [{
      build($_builder, $_state, TypeRange{result}, ValueRange{input}, mesh,
            axes, $_builder.getDenseI64ArrayAttr({dim}), async, reason);
    }]>
  ];
  let extraClassDeclaration = extraCollectiveDeclaration # [{
    /// The single input / result / dimension of a one-value gather (every
    /// one but `--loom-schedule-comm`'s buckets).
    Value getInput() { return getInputs().front(); }
    Value getResult() { return getResults().front(); }
    int64_t getDim() { return getDims().front(); }
  }];
  let hasVerifier = 1;
}

def Loom_ReduceScatterOp : Loom_CollectiveOp<"reduce_scatter", [Pure]> {
  let summary = "Reduce over the group and leave each member one shard";
  let description = [{
    The input's `dim` must be divisible by the group size; the result has
    that dimension divided by it. With `async` the runtime runs the
    following instructions while the reduction is in flight and completes
    it before the first instruction that touches its input or result (the
    buffer planner keeps the input alive until the result's first reader):
    ZeRO-2/3's and FSDP's reduce-scatter of a block's gradients while the
    next block's backward computes, placed by `--loom-schedule-comm`.

    Several inputs (a gradient bucket, as FSDP's flat parameter of a block
    or DeepSpeed ZeRO-2's reduce bucket) travel as one collective: result i
    is this rank's block of input i's dimension (`dim d` when every
    member's is d, `dims [d0, d1, ...]` otherwise) reduced over the group.
    The members share one element type; the runtime packs every
    member's block for each rank into one buffer (the inputs are free once
    it is packed), reduce-scatters it and unpacks this rank's blocks into
    the results. `--loom-schedule-comm` forms these buckets.

    With `last_microbatch` (only in a training step's micro-batch function
    or a pipeline chunk's backward) it runs in the step's last micro-batch
    alone, is the identity in the others, and reduces in place: each result
    has its input's type and storage, and holds this rank's block of its
    dimension reduced over the group (the block `local_slice` on the same
    axes reads) with zeros in the other blocks. ZeRO-1's accumulated
    gradients are reduce-scattered this way at the end of the last
    backward, overlapped with it, a block's in one bucket, and the update
    reads its block of each accumulator (Megatron's distributed optimizer
    reduce-scatters its gradient buffer in place, a bucket at a time).

    ```mlir
    %g = loom.reduce_scatter %grad on @mesh [dp] dim 0 sum
        : tensor<768x3072xf32> -> tensor<96x3072xf32>
    %h = loom.reduce_scatter %grad2 on @mesh [dp] dim 0 sum async
        {reason = "zero-2: h.0.mlp.c_fc.weight's gradient"}
        : tensor<768x3072xf32> -> tensor<96x3072xf32>
    %acc = loom.reduce_scatter %sum on @mesh [dp] dim 0 sum last_microbatch
        async {reason = "zero-1: wte.weight's accumulated gradient"}
        : tensor<256x64xf32> -> tensor<256x64xf32>
    %gw, %gb = loom.reduce_scatter %w, %b on @mesh [dp] dim 0 sum async
        {reason = "reduce-scatter bucket 0: 2 tensors"}
        : tensor<768x3072xf32>, tensor<3072xf32>
        -> tensor<96x3072xf32>, tensor<384xf32>
    %gp, %gq = loom.reduce_scatter %w, %qkv on @mesh [dp] dims [0, 1] sum
        : tensor<768x3072xf32>, tensor<3x768xf32>
        -> tensor<96x3072xf32>, tensor<3x96xf32>
    ```
  }];
  let arguments = (ins Variadic<Loom_FloatTensor>:$inputs,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       DenseI64ArrayAttr:$dims, Loom_ReductionKindAttr:$reduction,
                       OptionalAttr<StrAttr>:$reason, UnitAttr:$async,
                       UnitAttr:$last_microbatch);
  let results = (outs Variadic<Loom_FloatTensor>:$results);
  let assemblyFormat = [{
    $inputs `on` $mesh custom<MeshAxes>($axes) custom<MemberDims>(ref($inputs), $dims)
    custom<Reduction>($reduction)
    (`last_microbatch` $last_microbatch^)? (`async` $async^)? attr-dict
    `:` type($inputs) `->` type($results)
  }];
  let builders = [
    // One value (what the partitioner inserts).
    OpBuilder<(ins "Type":$result, "Value":$input, "FlatSymbolRefAttr":$mesh,
                   "ArrayAttr":$axes, "int64_t":$dim,
                   "ReductionKindAttr":$reduction, "StringAttr":$reason,
                   CArg<"UnitAttr", "{}">:$async,
                   CArg<"UnitAttr", "{}">:$last_microbatch), [{
      build($_builder, $_state, TypeRange{result}, ValueRange{input}, mesh,
            axes, $_builder.getDenseI64ArrayAttr({dim}), reduction, reason,
            async, last_microbatch);
    }]>
  ];
  let extraClassDeclaration = extraCollectiveDeclaration # [{
    /// The single input / result / dimension of a one-value reduce-scatter
    /// (every one but `--loom-schedule-comm`'s buckets).
    Value getInput() { return getInputs().front(); }
    Value getResult() { return getResults().front(); }
    int64_t getDim() { return getDims().front(); }
  }];
  let hasVerifier = 1;
}

def Loom_AllToAllOp : Loom_CollectiveOp<"all_to_all", [Pure]> {
  let summary = "Split one dimension over the group and concatenate another";
  let description = [{
    Each member splits `split_dim` into group-size pieces, sends piece j to
    member j, and concatenates what it receives along `concat_dim`.

    ```mlir
    %y = loom.all_to_all %x on @mesh [tp] split 1 concat 0
        : tensor<16x64xf32> -> tensor<64x16xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$split_dim,
                       I64Attr:$concat_dim, OptionalAttr<StrAttr>:$reason);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $input `on` $mesh custom<MeshAxes>($axes) `split` $split_dim `concat`
    $concat_dim attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_WaitOp : Loom_Op<"wait", [MemoryEffects<[MemRead]>]> {
  let summary = "Complete the in-flight collectives of some values here";
  let description = [{
    Reads its operands and does nothing else: an `async` collective that
    produced one (or reads or writes its bytes) completes before it, so the
    collective's scratch is free from here on. `--loom-schedule-comm` puts
    one after the block following ZeRO-1's in-place reduce-scatters, whose
    results nothing else reads before the optimizer update: the reduction
    travels while that block computes, and its received-block scratch does
    not stay allocated to the end of the backward.

    ```mlir
    loom.wait %acc1, %acc2 {reason = "h.1's reduce-scatters complete"}
        : tensor<768x3072xf32>, tensor<3072xf32>
    ```
  }];
  let arguments = (ins Variadic<Loom_FloatTensor>:$values,
                       OptionalAttr<StrAttr>:$reason);
  let assemblyFormat = [{
    $values attr-dict `:` type($values)
  }];
  let hasVerifier = 1;
}

def Loom_LocalSliceOp : Loom_CollectiveOp<"local_slice", [Pure]> {
  let summary = "This rank's block of a replicated value (no communication)";
  let description = [{
    The inverse of `loom.all_gather` on the same axes and dimension: each
    member keeps block i (its index in the group) of `dim`. The partitioner
    uses it where a whole value meets a consumer that works on shards, as
    ZeRO's sharded optimizer step does with a replicated parameter, or an
    embedding gradient of sequence-split rows with the whole token ids
    (hence index tensors too).

    ```mlir
    %shard = loom.local_slice %w on @mesh [dp] dim 0
        : tensor<768x3072xf32> -> tensor<96x3072xf32>
    ```
  }];
  let arguments = (ins AnyTypeOf<[Loom_FloatTensor, Loom_IndexTensor]>:$input,
                       FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$dim, OptionalAttr<StrAttr>:$reason);
  let results = (outs AnyTypeOf<[Loom_FloatTensor, Loom_IndexTensor]>:$result);
  let assemblyFormat = [{
    $input `on` $mesh custom<MeshAxes>($axes) `dim` $dim attr-dict `:`
    type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Loom_SendOp : Loom_CollectiveOp<"send", [MemoryEffects<[MemWrite]>]> {
  let summary = "Send a value to the device at another coordinate of one axis";
  let description = [{
    Point-to-point between pipeline stages: the peer is the device whose
    coordinate on the single axis named is `peer`, all other coordinates
    equal. A `loom.recv` with the same tag receives it.

    ```mlir
    loom.send %act to @mesh [pp] peer 1 tag 3 : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input, FlatSymbolRefAttr:$mesh,
                       StrArrayAttr:$axes, I64Attr:$peer, I64Attr:$tag,
                       OptionalAttr<StrAttr>:$reason);
  let assemblyFormat = [{
    $input `to` $mesh custom<MeshAxes>($axes) `peer` $peer `tag` $tag
    attr-dict `:` type($input)
  }];
}

def Loom_RecvOp : Loom_CollectiveOp<"recv", [MemoryEffects<[MemRead]>]> {
  let summary = "Receive a value sent by the device at another coordinate";
  let description = [{
    ```mlir
    %act = loom.recv from @mesh [pp] peer 0 tag 3 : tensor<4x64x768xf32>
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$mesh, StrArrayAttr:$axes,
                       I64Attr:$peer, I64Attr:$tag,
                       OptionalAttr<StrAttr>:$reason);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    `from` $mesh custom<MeshAxes>($axes) `peer` $peer `tag` $tag attr-dict
    `:` type($result)
  }];
}

include "dialects/Loom/IR/LoomTrainingOps.td"
include "dialects/Loom/IR/LoomPipelineOps.td"

#endif // LOOM_DIALECT_LOOM_IR_LOOMOPS_TD
