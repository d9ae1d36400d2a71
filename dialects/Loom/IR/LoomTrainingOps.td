//===- LoomTrainingOps.td - Backward and optimizer ops -----*- tablegen -*-===//
//
// What --loom-autodiff writes: one gradient op per forward op kind (each
// forward op's GradientOpInterface builds them), gradient-norm clipping (a
// shardable sum of squares, then the coefficient) and AdamW. Included from
// LoomOps.td.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECT_LOOM_IR_LOOMTRAININGOPS_TD
#define LOOM_DIALECT_LOOM_IR_LOOMTRAININGOPS_TD

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

def Loom_EmbeddingGradOp : Loom_ComputeOp<"embedding_grad"> {
  let summary = "Gradient of an embedding table: scatter-add rows";
  let description = [{
    `result[v, :] = sum of dout[i..., :] over positions where ids[i...] = v`;
    the result has the table's shape.

    ```mlir
    %dwte = loom.embedding_grad %dx, %ids
        : tensor<4x64x768xf32>, tensor<4x64xi32> -> tensor<50257x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_IndexTensor:$ids);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $dout `,` $ids attr-dict `:` type($dout) `,` type($ids) `->` type($result)
  }];
}

def Loom_ReduceLeadingOp : Loom_ComputeOp<"reduce_leading"> {
  let summary = "Sum over leading dimensions down to a trailing shape";
  let description = [{
    The gradient of a broadcast add's rhs: the result shape is a trailing
    part of the input shape, each element the sum over the leading ones.

    ```mlir
    %dpos = loom.reduce_leading %dx : tensor<4x64x768xf32> -> tensor<64x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
}

def Loom_LinearGradOp : Loom_ComputeOp<"linear_grad"> {
  let summary = "Gradients of x·W + b";
  let description = [{
    `dinput = dout·Wᵀ`, `dweight = xᵀ·dout` (over all leading dims),
    `dbias = Σ dout` when the forward op had a bias. As in `loom.linear`,
    the weight is `[in, out...]`.

    ```mlir
    %dx, %dw, %db = loom.linear_grad %dy, %x, %w
        : tensor<4x64x3072xf32>, tensor<4x64x768xf32>, tensor<768x3072xf32>
        -> tensor<4x64x768xf32>, tensor<768x3072xf32>, tensor<3072xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_FloatTensor:$input,
                       Loom_FloatTensor:$weight);
  let results = (outs Loom_FloatTensor:$input_grad,
                      Loom_FloatTensor:$weight_grad,
                      Optional<Loom_FloatTensor>:$bias_grad);
  let assemblyFormat = [{
    $dout `,` $input `,` $weight attr-dict `:` type($dout) `,` type($input) `,`
    type($weight) `->` type($input_grad) `,` type($weight_grad)
    (`,` type($bias_grad)^)?
  }];
}

def Loom_MatmulGradOp : Loom_ComputeOp<"matmul_grad"> {
  let summary = "Gradients of a matrix product";
  let description = [{
    ```mlir
    %dh, %dwte = loom.matmul_grad %dlogits, %h, %wte transpose_rhs
        : tensor<4x64x50257xf32>, tensor<4x64x768xf32>, tensor<50257x768xf32>
        -> tensor<4x64x768xf32>, tensor<50257x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_FloatTensor:$lhs,
                       Loom_FloatTensor:$rhs, UnitAttr:$transpose_rhs);
  let results = (outs Loom_FloatTensor:$lhs_grad, Loom_FloatTensor:$rhs_grad);
  let assemblyFormat = [{
    $dout `,` $lhs `,` $rhs (`transpose_rhs` $transpose_rhs^)? attr-dict `:`
    type($dout) `,` type($lhs) `,` type($rhs) `->` type($lhs_grad) `,`
    type($rhs_grad)
  }];
}

def Loom_LayerNormGradOp : Loom_ComputeOp<"layer_norm_grad"> {
  let summary = "Gradients of layer normalization";
  let description = [{
    Recomputes the row statistics from the input (cheap, O(N·C)) rather than
    keeping them alive from the forward pass.

    ```mlir
    %dx, %dw, %db = loom.layer_norm_grad %dy, %x, %w {epsilon = 1.0e-05 : f64}
        : tensor<4x64x768xf32>, tensor<4x64x768xf32>, tensor<768xf32>
        -> tensor<4x64x768xf32>, tensor<768xf32>, tensor<768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_FloatTensor:$input,
                       Loom_FloatTensor:$weight,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Loom_FloatTensor:$input_grad,
                      Loom_FloatTensor:$weight_grad,
                      Loom_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $dout `,` $input `,` $weight attr-dict `:` type($dout) `,` type($input) `,`
    type($weight) `->` type($input_grad) `,` type($weight_grad) `,`
    type($bias_grad)
  }];
}

def Loom_GeluGradOp : Loom_ComputeOp<"gelu_grad",
    [AllTypesMatch<["dout", "input", "result"]>]> {
  let summary = "Gradient of the tanh GELU";
  let description = [{
    ```mlir
    %dx = loom.gelu_grad %dy, %x : tensor<4x64x3072xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_FloatTensor:$input);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$dout `,` $input attr-dict `:` type($dout)";
}

def Loom_AttentionGradOp : Loom_ComputeOp<"attention_grad",
    [AttrSizedOperandSegments]> {
  let summary = "Gradient of causal multi-head attention";
  let description = [{
    Recomputes the attention probabilities from `qkv` (as flash attention
    does) instead of keeping the `[B, NH, T, T]` tensor from the forward.
    `qkv` is `[B, T, 3C]` or `[B, T, 3, C]`, as for `loom.attention`.

    With `saved` operands, the forward's output `[B, T, C]` and its f32
    log-sum-exp `[B, NH, T]` (`loom.attention`'s second result), the
    probabilities come from q, k and lse directly (FlashAttention-2's
    backward); without them the kernel first re-runs the forward for them.

    ```mlir
    %dqkv = loom.attention_grad %dy, %qkv {num_heads = 12 : i64}
        : tensor<4x64x768xf32>, tensor<4x64x2304xf32> -> tensor<4x64x2304xf32>
    %dqkv = loom.attention_grad %dy, %qkv saved %y, %lse {num_heads = 12 : i64}
        : tensor<4x64x768xf32>, tensor<4x64x2304xf32>, tensor<4x64x768xf32>,
          tensor<4x12x64xf32> -> tensor<4x64x2304xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_FloatTensor:$qkv,
                       Optional<Loom_FloatTensor>:$out,
                       Optional<Loom_F32Tensor>:$lse, I64Attr:$num_heads);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $dout `,` $qkv (`saved` $out^ `,` $lse)? attr-dict `:` type($dout) `,`
    type($qkv) (`,` type($out)^ `,` type($lse))? `->` type($result)
  }];
}

def Loom_SoftmaxGradOp : Loom_ComputeOp<"softmax_grad",
    [AllTypesMatch<["dout", "output", "result"]>]> {
  let summary = "Gradient of softmax, from its output";
  let description = [{
    `dx = y ⊙ (dy − Σ dy ⊙ y)` over the last dimension.

    ```mlir
    %dx = loom.softmax_grad %dy, %y : tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, Loom_FloatTensor:$output);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$dout `,` $output attr-dict `:` type($dout)";
}

def Loom_CrossEntropyGradOp : Loom_ComputeOp<"cross_entropy_grad",
    [DeclareOpInterfaceMethods<Loom_VocabMaskOpInterface, ["getPaddedResult"]>]> {
  let summary = "Gradient of the mean cross-entropy with respect to logits";
  let description = [{
    `dlogits = (softmax(logits) − onehot(targets)) · dloss / N`, N the
    number of tokens (`num_tokens` when set: the global count of tokens
    split across ranks). With `vocab_size` the columns from that index on
    are padding: out of the softmax, with a zero gradient.

    ```mlir
    %dl = loom.cross_entropy_grad %seed, %logits, %targets
        : tensor<f32>, tensor<4x64x256xf32>, tensor<4x64xi32> -> tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Loom_ScalarFloatTensor:$dloss, Loom_FloatTensor:$logits,
                       Loom_IndexTensor:$targets,
                       OptionalAttr<I64Attr>:$num_tokens,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $dloss `,` $logits `,` $targets attr-dict `:` type($dloss) `,`
    type($logits) `,` type($targets) `->` type($result)
  }];
}

def Loom_CrossEntropySumsGradOp : Loom_ComputeOp<"cross_entropy_sums_grad",
    [DeclareOpInterfaceMethods<Loom_VocabMaskOpInterface, ["getPaddedResult"]>]> {
  let summary = "Gradient of the mean cross-entropy from its maxima and sums";
  let description = [{
    `dlogits = (exp(logits - row_max) / sum_exp − onehot(targets)) · dloss
    / N`: `loom.cross_entropy_grad` with the softmax's statistics given, so
    that each rank computes the gradient of its vocabulary shard
    (`vocab_axes`, as for `loom.cross_entropy_sums`) from the reduced
    statistics, never the full logits. With `vocab_size` the padding
    columns (global index >= vocab_size) get a zero gradient.

    ```mlir
    %dl = loom.cross_entropy_sums_grad %seed, %logits, %m, %s, %targets
        : tensor<f32>, tensor<4x64x256xf32>, tensor<4x64xf32>,
          tensor<4x64xf32>, tensor<4x64xi32> -> tensor<4x64x256xf32>
    ```
  }];
  let arguments = (ins Loom_ScalarFloatTensor:$dloss, Loom_FloatTensor:$logits,
                       Loom_FloatTensor:$row_max, Loom_FloatTensor:$sum_exp,
                       Loom_IndexTensor:$targets,
                       OptionalAttr<StrArrayAttr>:$vocab_axes,
                       OptionalAttr<I64Attr>:$num_tokens,
                       OptionalAttr<I64Attr>:$vocab_size);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $dloss `,` $logits `,` $row_max `,` $sum_exp `,` $targets attr-dict `:`
    type($dloss) `,` type($logits) `,` type($row_max) `,` type($sum_exp) `,`
    type($targets) `->` type($result)
  }];
}

def Loom_SliceGradOp : Loom_ComputeOp<"slice_grad"> {
  let summary = "Gradient of a slice: zeros with the slice written back";
  let description = [{
    ```mlir
    %dwpe = loom.slice_grad %dpos dim 0 offset 0
        : tensor<64x768xf32> -> tensor<1024x768xf32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$dout, I64Attr:$dim, I64Attr:$offset);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = [{
    $dout `dim` $dim `offset` $offset attr-dict `:` type($dout) `->`
    type($result)
  }];
}

def Loom_FillOp : Loom_ComputeOp<"fill"> {
  let summary = "A tensor with every element equal to one value";
  let description = [{
    Seeds the backward pass: the loss gradient of one micro-batch is
    1/microbatches, so gradients accumulate to those of the global mean.

    ```mlir
    %seed = loom.fill 2.500000e-01 : tensor<f32>
    ```
  }];
  let arguments = (ins F64Attr:$value);
  let results = (outs Loom_FloatTensor:$result);
  let assemblyFormat = "$value attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

def Loom_SumSquaresOp : Loom_ComputeOp<"sum_squares"> {
  let summary = "Sum of the squares of every element of its operands";
  let description = [{
    `result = Σ over all operands and all their elements of g²`, the first
    half of global-norm clipping. It is a plain sum, so it shards: every
    dimension of every operand is a reduction factor, and a gradient split
    over a mesh axis (ZeRO-2/3, tensor parallelism) leaves a partial sum
    over that axis that the partitioner all-reduces as one scalar, instead
    of all-gathering the gradients.

    ```mlir
    %sumsq = loom.sum_squares %g0, %g1
        : tensor<768x3072xf32>, tensor<3072xf32> -> tensor<f32>
    ```
  }];
  let arguments = (ins Variadic<Loom_FloatTensor>:$inputs);
  let results = (outs Loom_ScalarF32Tensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($result)
  }];
}

def Loom_ClipCoefOp : Loom_ComputeOp<"clip_coef"> {
  let summary = "Global gradient norm and PyTorch's clipping coefficient";
  let description = [{
    From the global sum of squares (`loom.sum_squares`, reduced over every
    rank that holds a piece of the gradients): `norm = sqrt(sumsq)`,
    `coef = min(1, max_norm / (norm + 1e-6))` as
    `torch.nn.utils.clip_grad_norm_`, or 1 when `max_norm` <= 0 (no
    clipping). The gradients are not modified; AdamW scales by `coef` as it
    reads them.

    ```mlir
    %norm, %coef = loom.clip_coef %sumsq {max_norm = 1.0 : f64}
        : tensor<f32> -> tensor<f32>, tensor<f32>
    ```
  }];
  let arguments = (ins Loom_ScalarF32Tensor:$sumsq, F64Attr:$max_norm);
  let results = (outs Loom_ScalarF32Tensor:$norm,
                      Loom_ScalarF32Tensor:$coef);
  let assemblyFormat = [{
    $sumsq attr-dict `:` type($sumsq) `->` type($norm) `,` type($coef)
  }];
}

def Loom_AdamWOp : Loom_ComputeOp<"adamw", [
    AllTypesMatch<["param", "m", "v", "new_param", "new_m", "new_v"]>,
    AllTypesMatch<["lr", "step", "coef"]>]> {
  let summary = "One AdamW update of a parameter (PyTorch torch.optim.AdamW)";
  let description = [{
    With g = grad·coef, t = step, lr from the runtime's schedule:
    `p -= lr·weight_decay·p` (decoupled; weight_decay is 0 for biases and
    layer-norm parameters), `m = β1·m + (1−β1)·g`, `v = β2·v + (1−β2)·g²`,
    `p -= lr · (m / (1−β1^t)) / (sqrt(v / (1−β2^t)) + eps)`.

    The gradient has the parameter's shape and element type, or, under bf16
    mixed precision (`--loom-mixed-precision`), is bf16 while the parameter
    (the fp32 master weights) and the moments are f32: the kernel widens
    each gradient element as it reads it. The assembly names the gradient's
    type after the parameter's only when the two differ.

    ```mlir
    %p1, %m1, %v1 = loom.adamw %p, %g, %m, %v, %lr, %step, %coef
        {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64,
         weight_decay = 0.01 : f64}
        : tensor<768x3072xf32>, tensor<f32>
    %w1, %m1, %v1 = loom.adamw %master, %gbf16, %m, %v, %lr, %step, %coef
        {beta1 = 0.9 : f64, beta2 = 0.999 : f64, eps = 1.0e-08 : f64,
         weight_decay = 0.01 : f64}
        : tensor<768x3072xf32>, tensor<768x3072xbf16>, tensor<f32>
    ```
  }];
  let arguments = (ins Loom_FloatTensor:$param, Loom_FloatTensor:$grad,
                       Loom_FloatTensor:$m, Loom_FloatTensor:$v,
                       Loom_ScalarFloatTensor:$lr,
                       Loom_ScalarFloatTensor:$step,
                       Loom_ScalarFloatTensor:$coef,
                       F64Attr:$beta1, F64Attr:$beta2, F64Attr:$eps,
                       F64Attr:$weight_decay);
  let results = (outs Loom_FloatTensor:$new_param, Loom_FloatTensor:$new_m,
                      Loom_FloatTensor:$new_v);
  let assemblyFormat = [{
    $param `,` $grad `,` $m `,` $v `,` $lr `,` $step `,` $coef attr-dict `:`
    type($param) `,` custom<AdamWGradAndScalarTypes>(type($grad), type($lr),
                                                     ref(type($param)))
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Value":$param, "::mlir::Value":$grad,
      "::mlir::Value":$m, "::mlir::Value":$v, "::mlir::Value":$lr,
      "::mlir::Value":$step, "::mlir::Value":$coef, "double":$beta1,
      "double":$beta2, "double":$eps, "double":$weightDecay), [{
      build($_builder, $_state, param.getType(), param.getType(),
            param.getType(), param, grad, m, v, lr, step, coef,
            $_builder.getF64FloatAttr(beta1), $_builder.getF64FloatAttr(beta2),
            $_builder.getF64FloatAttr(eps),
            $_builder.getF64FloatAttr(weightDecay));
    }]>
  ];
}

#endif // LOOM_DIALECT_LOOM_IR_LOOMTRAININGOPS_TD
