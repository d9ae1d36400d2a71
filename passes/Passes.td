//===- Passes.td - All Loom passes -------------------------*- tablegen -*-===//
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

def LoomReport : Pass<"loom-report", "::mlir::ModuleOp"> {
  let summary = "Per-rank memory and communication of the program, before launch";
  let description = [{
    Reads the partitioned (and, for the peak, buffer-planned) program and
    prints what one rank will hold and send, the way the runtime measures
    it, so the two can be compared:

    * model state: bytes of parameters, gradient accumulators and AdamW
      moments resident at the optimizer step (local shapes), and in bf16
      mixed precision (`--loom-mixed-precision`) the fp32 master weights:
      the state as compiled, with its element types (JSON `precision`:
      `bf16` or `fp32`; an fp32 step also gets the figure it would have in
      mixed precision, `model_state_bytes_bf16_mixed`);
    * predicted peak: the planned arena (`loom.arena_bytes`);
    * sent bytes per step per collective kind, counted the nccl-tests way
      for a ring of n ranks with S the full buffer: all_reduce 2(n-1)/n·S,
      all_gather and reduce_scatter (n-1)/n·S, all_to_all (n-1)/n·S, send S;
      the micro-batch function's collectives count once per micro-batch.

    A pipelined module (`--loom-pipeline`) gets one set of figures per
    pipeline stage (its ranks run only that stage's functions); the loss
    all-reduce the runtime adds over the pipeline is counted too. For each
    stage the report also says where the traffic comes from: the bytes one
    execution of each phase (forward and backward actions, M per step; the
    update, once) sends, by collective and mesh axes, e.g. ZeRO-3's
    `all_gather[dp]` in every forward and backward action (JSON:
    `sent_bytes_by_phase`, for unpipelined steps too).

    The figures come from `measureRankFigures` (Analysis/RankFigures.h),
    which `--loom-to-program` also uses to store them in the program as
    the predictions loom-run reports next to what it measures.

    A non-pipelined step with a `loom.model` also gets, for its first
    transformer block, the activation memory of Korthikanti et al. 2022
    (sbh(34+5as/h), with TP sbh(10+24/t+5as/(ht)), with TP+SP
    sbh(34+5as/h)/t, selective 34sbh/t; 16-bit and fp32) next to the bytes
    Loom's own graph keeps for the backward, and the tensor-parallel
    traffic per block (Megatron: 2 + 2 all-reduces of b·s·h) next to the
    collectives Loom placed in the block (BlockActivations.h; JSON:
    `block_activations`).

    **Options:**
    * `json`: print one JSON object instead of text.
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print JSON instead of text">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

//===----------------------------------------------------------------------===//
// Autodiff
//===----------------------------------------------------------------------===//

def LoomAutodiff : Pass<"loom-autodiff", "::mlir::ModuleOp"> {
  let summary = "Derive the training step: backward pass, accumulation, AdamW";
  let description = [{
    Replaces each model function `@f` (params, tokens, targets -> scalar
    loss) by two functions that together are one training step:

    * `@f_train`, run once per micro-batch: the forward, then the backward
      built from every op's gradient rule (GradientOpInterface), seeded with
      1/microbatches so accumulated gradients are those of the global-batch
      mean. A parameter used twice (GPT-2's tied `wte`) gets the sum of its
      gradients. Each transformer block gets a backward block `<label>.grad`.
      New arguments `role = grad` are the gradient accumulators; the results
      are the loss and the updated accumulators (`loom.updates`).
    * `@f_update`, run once per step: `loom.sum_squares` over all
      gradients and `loom.clip_coef` of it (PyTorch's clip_grad_norm_; the
      sum shards with the gradients), then `loom.adamw` per parameter
      with decoupled weight decay on parameters of rank >= 2 only (nanoGPT:
      matmul weights and embeddings decay; biases and layer norms do not).
      The learning rate and step count are arguments the runtime sets.

    Model batch sizes are per micro-batch.

    **Options:**
    * `microbatches`: micro-batches per step (gradient accumulation).
    * `max-norm`: global gradient-norm clip (<= 0: no clipping).
    * `beta1`, `beta2`, `eps`, `weight-decay`: AdamW hyperparameters.
  }];
  let options = [
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"1",
           "Micro-batches per step">,
    Option<"maxNorm", "max-norm", "double", /*default=*/"1.0",
           "Global gradient-norm clip; <= 0 disables clipping">,
    Option<"beta1", "beta1", "double", /*default=*/"0.9", "AdamW beta1">,
    Option<"beta2", "beta2", "double", /*default=*/"0.999", "AdamW beta2">,
    Option<"eps", "eps", "double", /*default=*/"1e-8", "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double", /*default=*/"0.01",
           "Decoupled weight decay for parameters of rank >= 2">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect",
                           "::mlir::func::FuncDialect"];
}

//===----------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------===//

def LoomMixedPrecision : Pass<"loom-mixed-precision", "::mlir::ModuleOp"> {
  let summary = "bf16 mixed precision: bf16 compute, fp32 master weights and moments";
  let description = [{
    Megatron's / the ZeRO paper's mixed precision as types on the training
    step (after `--loom-autodiff`, before `--loom-recompute`, the sharding
    passes and `--loom-pipeline`), or on a forward-only model (evaluation):

    * In the micro-batch function (or the model), every f32 tensor of rank
      >= 1 becomes bf16: parameters (what forward and backward read),
      activations, saved values, gradients and the gradient accumulators
      (accumulated by a bf16 `loom.add`). Rank-0 scalars stay f32: the loss
      and its seed gradient. With `grad-precision=fp32` the accumulators
      stay f32 (Megatron's `--accumulate-allreduce-grads-in-fp32`): each
      micro-batch's bf16 gradient is widened by `loom.cast` (exact) and
      added in f32, and since a widening cast passes partial sums through,
      the data-parallel reductions of gradients run in f32 too.
    * The update function reads bf16 parameters and gradients (f32 with
      `grad-precision=fp32`) and gets one
      new f32 argument per parameter, its master weights (`role = master`,
      named after the parameter; appended after the other arguments, and
      returned updated in place). Each `loom.adamw` updates the master from
      the bf16 gradient (the moments stay f32), then `loom.cast` rounds the
      new master into the bf16 parameter. `loom.sum_squares` reads the bf16
      gradients and returns an f32 sum; lr, step, the norm and the clip
      coefficient stay f32.

    Model state is then 2 + 2 + 12 bytes per parameter (16Φ; 2 + 4 + 12 =
    18Φ with fp32 gradients, whose reductions move 4-byte elements). The master is
    training state like the moments, so `--loom-zero` shards it with them
    (ZeRO-1/2: each rank casts its shard of the master and the bf16
    parameter is all-gathered; ZeRO-3: the bf16 parameter is sharded and
    gathered in bf16), and collectives on bf16 values move 2-byte elements.

    Errors: a graph with a float type other than f32 (already converted, or
    f16/f64), a function already partitioned or pipelined, a module without
    a model or training step, an update function that reads a parameter
    other than through `loom.adamw`, a `dtype` other than bf16, a
    `grad-precision` other than bf16 or fp32, and with fp32 gradients a
    gradient accumulator not read once by a top-level `loom.add` returned
    as its update.

    **Options:**
    * `dtype`: the compute type; `bf16` (fp16 would need loss scaling, which
      Loom does not implement).
    * `grad-precision`: `bf16` (default; the ZeRO paper's 2-byte gradients)
      or `fp32` (gradients accumulated, reduced and clipped in fp32).
  }];
  let options = [
    Option<"dtype", "dtype", "std::string", /*default=*/"\"bf16\"",
           "Compute type of the mixed precision (bf16)">,
    Option<"gradPrecision", "grad-precision", "std::string",
           /*default=*/"\"bf16\"",
           "Gradient accumulators and their reductions: bf16 or fp32">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

//===----------------------------------------------------------------------===//
// Sharding
//===----------------------------------------------------------------------===//

def LoomPropagate : Pass<"loom-propagate", "::mlir::ModuleOp"> {
  let summary = "Fill in the sharding of every value from the seeded ones";
  let description = [{
    Seeds are `loom.sharding` on function arguments and `loom.shardings` on
    ops (written by hand, as GSPMD's mark_sharding, or by the ZeRO and
    tensor-parallel passes). Each op's ShardingRuleOpInterface relates the
    dimensions of its operands and results through factors; propagation
    gives every unsharded value the split its factors carry, forward and
    backward through the graph and across transformer-block boundaries,
    until nothing changes. A result whose contracted factors are split
    holds partial sums (`partial = [...]`).

    Seeds are never overwritten. A seed on an op's result fixes the axes it
    names; its other dimensions and partial axes stay open (as Shardy's open
    dimensions) and take what the op itself (or the block plumbing carrying
    the value) propagates, never what a consumer does: tensor parallelism
    can seed activations before `--loom-zero` decides the batch split on
    dp. When two values disagree on a factor, the split with more axes
    wins, then the earlier operand; a remark explains each such choice. A
    mesh axis that would split two dimensions of one tensor goes first to a
    factor that an already sharded result of the op uses (that result is
    decided; the operands are resharded to it, silently: e.g. sequence
    parallelism's gathered inputs), then to the earlier factor; a remark
    names each other dropped split.

    Training state (a parameter, its gradient accumulator, its moments) is
    one tensor per `loom.name` and role across functions: functions are
    propagated in order, and what one decided for such an argument seeds
    the same argument of the next (a bias whose split followed from a
    hand-annotated weight in the training step keeps it in the optimizer
    update).
  }];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomRecompute : Pass<"loom-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recomputation: backward blocks re-run their forward";
  let description = [{
    Runs on the training step (after `--loom-autodiff`, before any
    partitioning). With `mode=full`, every backward `loom.block` that reads
    activations its forward block saved clones the forward block's body at
    its top, fed by the forward block's inputs (added as inputs of the
    backward block where missing), and reads the recomputed values: between
    the forward and the backward pass only each block's inputs stay alive
    (Korthikanti et al. 2022, full recomputation), for one extra forward per
    block. Attention's T×T scores and probabilities are recomputed in every
    mode (the forward keeps only qkv, the output and its log-sum-exp);
    `selective` also recomputes each block's GELU output in its backward
    block, from the pre-activation the GELU gradient reads anyway, right
    before its first reader (llm.c's --recompute 1: the block keeps
    sbh(8+16/t) bytes of 16-bit values instead of sbh(8+24/t)); `none` is
    the default.

    **Options:**
    * `mode`: none | selective | full.
  }];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"none\"",
           "none, selective or full">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomZero : Pass<"loom-zero", "::mlir::ModuleOp"> {
  let summary = "Seed the data-parallel / ZeRO shardings on the dp axis";
  let description = [{
    Data parallelism as shardings (DESIGN.md §2): the token ids and targets
    of every function are split by rows over `axis`; propagation then splits
    every activation, and the weight gradients, sums over split tokens, come
    out as partial sums that the partitioner all-reduces. Stage 0 is DDP.
    Stage 1 also splits the AdamW moments (on their first dimension the
    axis divides): each rank updates its shard of every parameter, which
    the partitioner then all-gathers. Stage 2 also splits the gradient
    accumulators the same way (each micro-batch's partial gradients are
    reduce-scattered into them); stage 3 also splits the parameters, which
    the partitioner gathers inside each block where they are used (once for
    the forward, once for the backward) and frees after the last use.

    **Options:**
    * `stage`: ZeRO stage (0 = DDP).
    * `axis`: the data-parallel mesh axis (default `dp`).
  }];
  let options = [
    Option<"stage", "stage", "int64_t", /*default=*/"0", "ZeRO stage">,
    Option<"axis", "axis", "std::string", /*default=*/"\"dp\"",
           "Data-parallel mesh axis">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomTensorParallel : Pass<"loom-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Seed Megatron-LM tensor-parallel shardings on the tp axis";
  let description = [{
    Tensor parallelism as shardings (DESIGN.md §2): this pass only seeds
    parameters; propagation carries the splits through every activation and
    gradient and the partitioner derives the collectives (Megatron's f and
    g: one all-reduce after each row-parallel linear in the forward, one
    before each block's layer norms in the backward).

    Parameters are recognized by their role in the graph, not by name:

    * the linear producing an attention op's `[B, T, 3, C]` q|k|v input
      (GPT-2's `attn.c_attn`) is column-parallel: its weight and bias split
      on the last dimension, so each rank holds whole heads' q, k and v and
      attends with them (the attention op's heads factor);
    * a linear reading an attention result (`attn.c_proj`) is row-parallel:
      its weight splits on the input dimension; its bias stays whole and is
      added after the all-reduce;
    * in a linear -> gelu -> linear chain (`mlp.c_fc`, `mlp.c_proj`) the
      first is column-parallel and the second row-parallel;
    * an embedding table (`wte`, tied with the LM head) splits on vocabulary
      rows (vocab-parallel embedding). The logits then come out split on the
      vocabulary, and the loss is lowered to Megatron's vocab-parallel
      cross-entropy (`loom.row_max`, `loom.cross_entropy_sums`,
      `loom.cross_entropy_from_sums`; `loom.cross_entropy_sums_grad` for its
      gradient): per-token maxima and sums are all-reduced, the logits are
      never gathered.

    The gradient accumulators and AdamW moments of a parameter (same
    `loom.name`) get its sharding. Hand-written shardings on the axis (as
    GSPMD's mark_sharding) take precedence: when any parameter carries one,
    only those are used (and copied to the parameters' state). A model with
    neither structure nor annotations stays replicated over the axis, with a
    remark saying so.

    With `sequence-parallel` (Korthikanti et al. 2022, Megatron-LM's
    `--sequence-parallel`) the residual stream between the matmuls is split
    on the sequence (the dimension before the channels) over the same axis:
    every layer norm's result and the residual add (or embedding sum) it
    reads are seeded so, and the token ids stay whole. The ops where that
    split competes with a weight's for the axis get their result seeded
    with the Megatron split (column-parallel linears and the LM head keep
    their output split; in the backward a column-parallel input gradient is
    a partial sum, a row-parallel one keeps its split), so the partitioner
    derives the collectives: an all-gather on the sequence before each
    column-parallel linear and the LM head, a reduce-scatter onto the
    sequence instead of the all-reduce after each row-parallel linear and
    the vocab-parallel embedding; in the backward a reduce-scatter into
    each layer norm gradient and an all-gather of the output gradient
    before each row-parallel linear, plus (as Megatron) an all-gather of
    the saved sequence shard before each column-parallel weight gradient.
    Row-parallel biases are added after the reduce-scatter, to this rank's
    tokens. Layer-norm weight and bias gradients become partial sums over
    the axis and are all-reduced into their accumulators.

    Vocab padding (Megatron-LM's `--make-vocab-size-divisible-by`): an
    embedding table whose rows the axis does not divide (GPT-2's 50257 at
    tp = 8) is padded to the next multiple of `vocab-divisible-by` x tp rows
    (50257 -> 51200 at tp = 8 with the default 128: each rank a block of 6400
    rows, a multiple of 128 for the GEMMs); a table the axis divides is
    left as it is. The padding spreads through the graph along the ops'
    sharding-rule factors (logits, table gradient, AdamW state); the padding
    rows start at zero and stay zero (`loom.unpadded_rows` on the param), the
    padded logit columns are masked out of the loss (`vocab_size` on
    `loom.row_max`, `loom.cross_entropy_sums`,
    `loom.cross_entropy_sums_grad`: they enter neither the maximum nor the
    sums, and their gradient is zero), and checkpoints hold the unpadded
    `[vocab, n_embd]` tensor.

    Errors: heads, hidden sizes not divisible by the axis size; a padded
    dimension an op needs whole; with `sequence-parallel`, a sequence length
    not divisible by it, or hand-written shardings (which replace Megatron's
    layout) — each with what to change.

    **Options:**
    * `axis`: the tensor-parallel mesh axis (default `tp`).
    * `sequence-parallel`: also split the residual stream on the sequence
      over the axis (see above).
    * `vocab-divisible-by`: the padding granularity per rank (default 128,
      as Megatron's; 1 pads to the next multiple of tp).
  }];
  let options = [
    Option<"axis", "axis", "std::string", /*default=*/"\"tp\"",
           "Tensor-parallel mesh axis">,
    Option<"sequenceParallel", "sequence-parallel", "bool",
           /*default=*/"false",
           "Sequence parallelism on the same axis (Korthikanti et al. 2022)">,
    Option<"vocabDivisibleBy", "vocab-divisible-by", "int64_t",
           /*default=*/"128",
           "Pad an embedding table tp does not divide to a multiple of this "
           "times tp rows (Megatron's make-vocab-size-divisible-by)">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomPadVocab : Pass<"loom-pad-vocab", "::mlir::ModuleOp"> {
  let summary = "Pad an unsplit embedding table to a multiple of "
                "vocab-divisible-by rows";
  let description = [{
    Megatron-LM's `--make-vocab-size-divisible-by` at tp = 1 (with tp > 1,
    `--loom-tensor-parallel` pads): an embedding table whose rows are not a
    multiple of `vocab-divisible-by` (default 128) is padded to the next
    multiple: GPT-2's 50257 rows become 50304. An odd vocabulary gives the
    tied LM head's logits odd-length rows, which no 16-byte-aligned GEMM
    kernel can read: cuBLASLt measured 95-149 TFLOP/s on GPT-2's three LM-head
    GEMMs on an H200 against 430-690 on its other GEMMs.

    The padding is VocabPadding.h's, as with tensor parallelism: it spreads
    along the ops' sharding-rule factors (logits, the table's gradient, the
    AdamW state); the padding rows start at zero and stay zero
    (`loom.unpadded_rows` on the parameter); `loom.cross_entropy` and its
    gradient get `vocab_size`, so the padded logit columns stay out of the
    softmax and get a zero gradient; checkpoints hold the unpadded
    `[vocab, n_embd]` tensor. The real rows compute what the unpadded model
    computes.

    `vocab-divisible-by` = 1 leaves the table as it is. Errors: an op that
    needs the vocabulary dimension whole (other than the loss), with what to
    change.

    **Options:**
    * `vocab-divisible-by`: the padding granularity (default 128).
  }];
  let options = [
    Option<"vocabDivisibleBy", "vocab-divisible-by", "int64_t",
           /*default=*/"128",
           "Pad embedding tables to a multiple of this many rows">,
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomPartition : Pass<"loom-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrite to per-rank local shapes and insert collectives";
  let description = [{
    Reads the shardings `--loom-propagate` left on every value and turns the
    global program into the one each rank runs: every split dimension shrinks
    to its local size, a partial sum is all-reduced right before the first
    op that needs the whole value (reduce-scattered when the op wants a
    dimension split over some of its partial axes, the rest all-reduced
    after on the smaller shard; sliced first where it wants a split over
    other axes), a dimension an op needs whole is all-gathered (before any
    slice over the same axis on another dimension), a whole operand of a
    contracted factor another operand keeps split is sliced to match, a
    result is partial only over the axes its operands' contracted
    dimensions are read split over, and function results get the sharding
    of the argument they update (or none). Each inserted collective records why in
    `reason`. Cross-entropy ops over split tokens get the global token count
    (`num_tokens`) so that each rank computes its share of the global mean.
    The sharding attributes (which describe global shapes) are removed.

    Data-parallel gradients of an unpipelined training step are then
    reduced once per step, not once per micro-batch (PyTorch DDP's
    `no_sync` over the first M-1 micro-batches, DeepSpeed's gradient
    accumulation): a whole gradient (DDP, ZeRO-1) is accumulated locally
    over the micro-batches and reduced once (a sum of sums is the sum).
    Where the update reads only the rank's dp block of it (ZeRO-1) it is
    reduce-scattered at the start of the update, so ZeRO-1 sends what DDP
    sends (reduce-scatter + all-gather; ZeRO paper §5, DeepSpeed stage 1).
    A whole all-reduce (DDP) stays in the micro-batch function as a
    `last_microbatch` all-reduce of the accumulated sum, placed right after
    the accumulation, which moves up to right after its gradient: the
    runtime skips it in the first M-1 micro-batches and runs it in the
    last, where `--loom-schedule-comm` buckets it and overlaps it with the
    rest of that backward (as DDP's reducer does on the micro-batch it
    syncs). With one micro-batch only ZeRO-1's reductions move (a whole
    all-reduce stays in the backward, where `--loom-schedule-comm`
    overlaps it). ZeRO-2/3's gradients stay reduce-scattered per
    micro-batch: a sharded accumulator is what bounds their gradient
    memory to 1/N, and deferring would need the whole gradient resident.
    The logic (Sharding/GradientReduction.h) is shared with
    `--loom-pipeline`, which does the same per stage: a mesh with
    `pipeline-axis` of size > 1 is left to it.

    **Options:**
    * `reduce-once-per-step` (default true): false keeps every all-reduce
      in the micro-batch function (M reductions per step; for comparison).
    * `pipeline-axis` (default `pp`): the axis whose presence (size > 1)
      means `--loom-pipeline` follows and reduces per stage.
  }];
  let options = [
    Option<"reduceOncePerStep", "reduce-once-per-step", "bool",
           /*default=*/"true",
           "Reduce data-parallel gradients once per step in the update, not "
           "in every micro-batch">,
    Option<"pipelineAxis", "pipeline-axis", "std::string",
           /*default=*/"\"pp\"",
           "Pipeline axis: a mesh with it (size > 1) is reduced per stage by "
           "--loom-pipeline">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomScheduleComm : Pass<"loom-schedule-comm", "::mlir::ModuleOp"> {
  let summary = "Bucket all-reduces, prefetch ZeRO-3 gathers, overlap compute";
  let description = [{
    Runs on a partitioned program. DDP's gradient buckets (PyTorch's
    `bucket_cap_mb`): the all-reduces of one function's top level that
    reduce over the same axes with the same reduction and element type are
    grouped, in the order their inputs become ready, into buckets of at
    most `bucket-mb` MiB (a larger tensor is a bucket of its own); each
    bucket is one `loom.all_reduce` of several values, placed right after
    its last input is produced (a backward block's gradients are reduced
    while the next backward block runs) and marked `async`: the runtime
    completes it only before the first instruction that reads a result.
    A bucket closes early when its next candidate becomes ready only after
    a result of the bucket is already needed. Traffic is unchanged: a
    bucket sends the sum of its members' ring bytes. All-reduces over a
    pipeline axis (one that `loom.send` / `loom.recv` use) are left as they
    are: their members run other stages' functions, where the matching
    all-reduce may stay blocking, and MPI does not match a nonblocking
    collective with a blocking one. The once-per-step reductions
    `--loom-partition` places in an optimizer update read only arguments
    (the accumulated gradients): their buckets start at the top of the
    update, and each AdamW waits only for its own bucket. A DDP step's
    `last_microbatch` all-reduces bucket only with each other (the bucket
    keeps the flag: it runs in the last micro-batch alone).

    ZeRO-2/3's gradient reduce-scatters (FSDP's): the partitioner leaves
    them, with the accumulations into the sharded gradients, after the
    whole backward, every block's whole gradients allocated until then.
    Each moves to right after its gradient is computed, `async` (the
    runtime completes it before the first instruction touching its input,
    result or packed copy), and its accumulation moves to right after the
    next block: the reduction travels while that block's backward computes
    and the whole gradient is freed one block later. The reduce-scatters
    launched behind the same op (a backward block's gradients) with the
    same axes, reduction and element type are bucketed as the all-reduces
    are (at most `bucket-mb` MiB of input each; a larger tensor alone),
    each member split on its own dimension (`dims [...]`): one collective
    per block, as FSDP reduce-scatters a block's flat gradient, not one per
    tensor (a GPT-2 block has 12, its c_attn.bias split on dim 1).
    Traffic is unchanged. A bucket's packed copy replaces its inputs while
    it travels, and this rank's blocks arrive in a buffer of their own
    (1/N of the bucket), unpacked into the results when it completes.
    ZeRO-1's in-place last-micro-batch reduce-scatters are launched where
    the partitioner put them, right after their accumulation, those that
    complete after the same block with the same axes, reduction and element
    type bucketed (at most `bucket-mb` MiB of input; Megatron's distributed
    optimizer reduce-scatters its gradient buffer a bucket at a time) in
    the last member's place, each member reduced in place; nothing reads
    their results before the update, so a `loom.wait` on them after the
    next block completes them there (their scratch free from then on, not
    kept to the end of the backward). Once-per-step
    reduce-scatters of accumulated gradients in an update go out at its
    top, each waited for by its first reader. Not over a pipeline axis.

    **Options:**
    * `bucket-mb`: bucket capacity in MiB (default 25, as DDP), for the
      all-reduces, the reduce-scatters (ZeRO-1's in place, ZeRO-2/3's),
      the ZeRO-3 gathers and the ZeRO-1/2 gathers of the updated
      parameters; 0 keeps one collective per value (still launched
      early).
    * `overlap`: mark the all-reduces and reduce-scatters `async` (default
      true); false places them the same way, blocking.
    * `prefetch`: ZeRO-3 / FSDP prefetch (default true): a block's gathers
      of its sharded parameters move to just before the previous block,
      `async`, so they travel while it computes; the gathered value enters
      the block as an extra input and dies after its last use there. Not
      when the previous block takes the same parameter (a block's forward
      just before its own backward gathers it itself), and only parameters
      (function arguments): a sequence-parallel activation shard is
      gathered in its own block. The gathers prefetched before one block
      with the same axes and element type (whatever dimension each
      gathers) are bucketed (at most
      `bucket-mb` MiB gathered each; a larger tensor alone), as FSDP
      gathers a block's flat parameter with one collective: this rank's
      shards packed, every rank's received into one buffer, each result
      unpacked from it when it completes. A block's own gathers of its
      parameters (the first block's forward, a backward right after its
      forward; every block without prefetch) move to the block's start and
      are bucketed the same way, blocking (its first ops need them).

    ZeRO-1/2's gathers of the updated parameters (DeepSpeed's all-gather of
    the updated partitions, Megatron's distributed optimizer's parameter
    all-gather): the partitioner places them before the update's return,
    after every AdamW step, one blocking collective per tensor. A gather
    whose result only updates an argument in place (`loom.updates`: the
    parameter's own storage, so moving it costs no memory) moves to right
    after the shard it gathers is computed, `async`, and those with the
    same axes and element type share buckets of at most `bucket-mb` MiB
    gathered, each launched behind its last member; a `loom.wait` behind
    the next bucket completes each (the last completes at the end), so the
    gathers travel while the remaining AdamW steps compute and at most two
    buckets' buffers are live (GPT-2 124M at dp=8: 148 gathers per step in
    17 buckets, same bytes and planned peak).
  }];
  let options = [
    Option<"bucketMb", "bucket-mb", "double", /*default=*/"25.0",
           "Bucket capacity in MiB, all-reduces, reduce-scatters and "
           "gathers (0: no coalescing)">,
    Option<"overlap", "overlap", "bool", /*default=*/"true",
           "Launch the collectives asynchronously">,
    Option<"prefetch", "prefetch", "bool", /*default=*/"true",
           "Gather a block's sharded parameters during the previous block">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

//===----------------------------------------------------------------------===//
// Pipeline
//===----------------------------------------------------------------------===//

def LoomPipeline : Pass<"loom-pipeline", "::mlir::ModuleOp"> {
  let summary = "Cut the training step into pipeline stages with a schedule";
  let description = [{
    Runs on a training step (`--loom-autodiff`, optionally partitioned over
    dp and tp). The micro-batch function is a sequence of units: `embedding` (the
    ops before the first block), each transformer block, `head` (final
    norm, LM head, loss). They are grouped into `stages` x `virtual-stages`
    contiguous chunks balanced by the ops' cost interface (a roofline per
    op, forward plus backward; the embedding and the head count like any
    block), and each chunk becomes two functions: `@<model>_fwd<k>` (one
    micro-batch's forward of its units; returns the loss on the last chunk
    and the activations its backward needs, `loom.stash`) and
    `@<model>_bwd<k>` (the backward of the same units, accumulating the
    gradients of the parameters it holds, each right after it is computed
    and after the send of the activation gradient the previous chunk waits
    for, so no weight gradient is held to the end). Chunk k runs on stage k mod
    stages. Values crossing chunks travel by `loom.send` / `loom.recv` on
    the pipeline axis: activations forward, their gradients backward.

    A parameter used on several stages (GPT-2's tied `wte`: embedding on the
    first stage, LM head on the last) lives on each of them; each
    accumulates its own contribution and `@<model>_update_stage<s>` sums
    them with a `loom.group_all_reduce` among those stages before clipping
    and AdamW (Megatron's embedding group). Each stage's update counts its
    own gradients in the norm (a shared one once) and all-reduces the sum of
    squares over the pipeline axis.

    On a partitioned step (tensor parallelism, ZeRO 0-3 on dp, any mesh
    axis order) each stage function keeps the collectives of its own units:
    Megatron's tp all-reduces, the vocab-parallel embedding and loss, and
    ZeRO-3's gathers inside each block, which therefore run in every
    forward and again in every backward action (per micro-batch; nothing
    gathered is stashed). A gradient accumulation whose contributions are
    reduce-scattered (ZeRO-2/3) or sliced into a dp-sharded accumulator is
    split like a sum: each chunk reduce-scatters its own contributions in
    each backward action, and the tied wte's shards are summed between the
    stages once per step; whole gradients are accumulated locally and
    all-reduced over dp once per step (`reduce-once-per-step`). Send / recv
    pair ranks with equal coordinates on every other axis. See
    docs/3d-parallelism.md.

    A `loom.pipeline_schedule` records the cut and every stage's ordered
    actions: GPipe, 1F1B or interleaved 1F1B; the pass then simulates the
    sends and receives in that order and fails if the schedule could
    deadlock or mismatch micro-batches.

    With `forward-only` the pass cuts an evaluation (a model function that
    returns the loss, no `--loom-autodiff`) the same way: each chunk gets
    only its forward function (the last chunk's returns the micro-batch's
    loss), nothing is stashed, there is no update, and every stage runs the
    forward actions of the schedule in its order (Megatron's forward-only
    schedule). The runtime sums the micro-batch losses over the pipeline
    axis and divides by `microbatches`, the mean over the whole batch.

    **Options:**
    * `stages`: pipeline stages (the size of `axis`; a mesh is created when
      the module has none).
    * `microbatches`: micro-batches per step (0: those of the training step;
      another count is an error, since the loss seed is 1/microbatches). With
      `forward-only`, the micro-batches the evaluated batch is split into
      (0: 1); the function's batch is one micro-batch.
    * `forward-only`: cut an evaluation instead of a training step.
    * `schedule`: `gpipe`, `1f1b` or `interleaved`.
    * `virtual-stages`: chunks per stage (interleaved only).
    * `axis`: the pipeline mesh axis (default `pp`).
    * `reduce-once-per-step` (default true): a gradient the partitioned
      step all-reduces over dp before accumulating it (DDP, ZeRO-1, or a
      ZeRO-2/3 gradient dp cannot split) is accumulated locally over the
      micro-batches and all-reduced once, in the last micro-batch's
      backward of the chunk that accumulates it (a `last_microbatch`
      all-reduce right after the accumulation, which `--loom-schedule-comm`
      overlaps with the rest of that backward, as Megatron-LM's overlapped
      gradient reduction), or reduce-scattered at the start of its stage's
      update when the update reads only the rank's dp block (ZeRO-1); false
      keeps the all-reduce in every backward action.
      Reduce-scattered (ZeRO-2/3 sharded) gradients stay per micro-batch.
    * `peak-tflops`, `bandwidth-gbs`: the roofline the costs are
      estimated on (only their ratio changes the cut); recorded on the
      schedule as `loom.cost_model` for the report and the program's
      predicted timeline.
  }];
  let options = [
    Option<"stages", "stages", "int64_t", /*default=*/"1",
           "Pipeline stages">,
    Option<"microbatches", "microbatches", "int64_t", /*default=*/"0",
           "Micro-batches per step (0: those of the training step)">,
    Option<"schedule", "schedule", "std::string", /*default=*/"\"1f1b\"",
           "gpipe, 1f1b or interleaved">,
    Option<"virtualStages", "virtual-stages", "int64_t", /*default=*/"1",
           "Model chunks per stage (interleaved)">,
    Option<"axis", "axis", "std::string", /*default=*/"\"pp\"",
           "Pipeline mesh axis">,
    Option<"reduceOncePerStep", "reduce-once-per-step", "bool",
           /*default=*/"true",
           "All-reduce whole data-parallel gradients once per step in the "
           "update, not in every backward action">,
    Option<"peakTflops", "peak-tflops", "double", /*default=*/"100.0",
           "Peak FLOP/s of the cost model, in TFLOP/s">,
    Option<"bandwidthGbs", "bandwidth-gbs", "double", /*default=*/"2000.0",
           "Memory bandwidth of the cost model, in GB/s">,
    Option<"forwardOnly", "forward-only", "bool", /*default=*/"false",
           "Cut an evaluation (forward and loss only) instead of a training "
           "step">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect",
                           "::mlir::func::FuncDialect"];
}

def LoomPipelineReport : Pass<"loom-pipeline-report", "::mlir::ModuleOp"> {
  let summary = "Simulated timeline, bubble and activations in flight";
  let description = [{
    Reads the `loom.pipeline_schedule` of a pipelined module, checks it by
    simulation (a deadlock or a mismatched send / receive is an error
    naming the stage, the action and the micro-batch), and prints the
    timeline the cost model predicts: per stage its chunks and units, the
    forward and backward time of one micro-batch, busy and idle time, and
    the activations in flight (micro-batches whose forward ran and whose
    backward has not, and the bytes they stash). The bubble fraction is the
    idle share of the step, next to the formula for equal stages:
    (p - 1) / (m + p - 1) for GPipe and 1F1B, (p - 1) / (v m + p - 1)
    interleaved. For comparison the report also simulates the other
    schedule of the same cut (GPipe for 1F1B and back); an interleaved cut
    is compared with 1F1B on the same layers per stage (one chunk per
    stage), which shows the bubble shrinking by v.

    **Options:**
    * `json`: print one JSON object instead of text.

    A non-pipelined step with a `loom.model` also gets, for its first
    transformer block, the activation memory of Korthikanti et al. 2022
    (sbh(34+5as/h), with TP sbh(10+24/t+5as/(ht)), with TP+SP
    sbh(34+5as/h)/t, selective 34sbh/t; 16-bit and fp32) next to the bytes
    Loom's own graph keeps for the backward, and the tensor-parallel
    traffic per block (Megatron: 2 + 2 all-reduces of b·s·h) next to the
    collectives Loom placed in the block (BlockActivations.h; JSON:
    `block_activations`).
    * `svg`: also draw the schedule to this file (stages x time, forward
      and backward boxes, bubbles as gaps).
    * `print`: print the report (default); false only checks and draws.
    * `peak-tflops`, `bandwidth-gbs`: the roofline (as --loom-pipeline);
      when not given, the machine --loom-pipeline recorded on the schedule
      (`loom.cost_model`), else 100 TFLOP/s and 2000 GB/s.
    * `link-gbs`: point-to-point bandwidth between stages (0: free).
  }];
  let options = [
    Option<"json", "json", "bool", /*default=*/"false",
           "Print JSON instead of text">,
    Option<"svg", "svg", "std::string", /*default=*/"\"\"",
           "Write the schedule as SVG to this file">,
    Option<"print", "print", "bool", /*default=*/"true",
           "Print the report (false: only check and draw)">,
    Option<"peakTflops", "peak-tflops", "double", /*default=*/"100.0",
           "Peak FLOP/s of the cost model, in TFLOP/s">,
    Option<"bandwidthGbs", "bandwidth-gbs", "double", /*default=*/"2000.0",
           "Memory bandwidth of the cost model, in GB/s">,
    Option<"linkGbs", "link-gbs", "double", /*default=*/"0.0",
           "Point-to-point bandwidth between stages in GB/s (0: free)">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

//===----------------------------------------------------------------------===//
// Lowering
//===----------------------------------------------------------------------===//

def LoomFoldAccumulation : Pass<"loom-fold-accumulation", "::mlir::ModuleOp"> {
  let summary = "With one micro-batch, gradients are written to their "
                "accumulators instead of added to them";
  let description = [{
    A training step's micro-batch function returns `acc + g` for every
    parameter's gradient accumulator. The executor zeroes the accumulators
    before the step's first micro-batch, so with one micro-batch
    (`loom.train = {phase = "microbatch", microbatches = 1}`) the sum is
    `g`: the add is dropped and `g` returned as the accumulator's update.
    `--loom-plan-buffers` then places g's storage in the accumulator's, and
    the op that computes the gradient writes it there (Megatron's
    gradient-accumulation fusion): one elementwise kernel and one transient
    buffer fewer per parameter.

    Folds only where it is exact and the planner can honour it: the add is
    the returned value and its only reader, the accumulator has the add as
    its only reader, `g` has the accumulator's type, is read by nothing
    else, and owns storage of the same bytes that holds no argument or other
    returned value. Pipeline stages and steps of several micro-batches are
    left as they are.
  }];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

def LoomPlanBuffers : Pass<"loom-plan-buffers", "::mlir::ModuleOp"> {
  let summary = "Give every tensor a static offset in one arena per rank";
  let description = [{
    Linearizes each model function as the runtime will execute it (blocks
    inlined; reshapes and block boundaries are views), computes each
    storage's live range, and places it in one arena: parameters, inputs and
    targets first and for the whole step, then every other tensor and
    kernel scratch (attention row statistics, layer-norm statistics) by
    greedy best-fit in decreasing size, reusing bytes whose previous tenant
    is dead. What a pipeline forward keeps for its backward (`loom.stash`
    results) goes to the chunk's stash slot instead, one per micro-batch in
    flight outside the arena, packed in result order; the backward's stash
    arguments get the same slot offsets. A result whose kernel reads each
    element of one operand before writing it (an add's lhs, a GELU
    gradient's incoming gradient, a softmax's input, a cross-entropy
    gradient's logits) takes that operand's bytes when the op is its last
    reader: the step's logits gradient is written over the logits.
    Annotates:

    * function arguments: `loom.offset` (bytes; a stash argument's in the
      slot);
    * ops: `loom.offsets` (one per result), `loom.scratch_offsets`, and
      `loom.in_stash` where a result's offset is in the slot;
    * the function: `loom.arena_bytes`, the arena size = predicted peak; a
      pipeline forward also `loom.stash_bytes`, its slot's size.

    `loom-translate --loom-to-program` reads these annotations.

    **Options:**
    * `alignment`: byte alignment of every buffer (default 64).
    * `in-place`: let results take a dying operand's bytes as above
      (default true; false gives every result bytes of its own).
  }];
  let options = [
    Option<"alignment", "alignment", "int64_t", /*default=*/"64",
           "Byte alignment of every buffer">,
    Option<"inPlace", "in-place", "bool", /*default=*/"true",
           "Let a result take the bytes of an operand its op reads last">
  ];
  let dependentDialects = ["::mlir::loom::LoomDialect"];
}

#endif // LOOM_PASSES_PASSES_TD
