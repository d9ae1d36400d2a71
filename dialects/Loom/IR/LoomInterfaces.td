//===- LoomInterfaces.td - Gradient, sharding, cost rules --*- tablegen -*-===//
//
// Autodiff, sharding propagation, the pipeline balancer and the memory report
// are written once against these interfaces, never per model (DESIGN.md §2).
// An op implements an interface when the pass that uses it exists; an op
// without an implementation gets a diagnostic naming it from that pass.
//
//===----------------------------------------------------------------------===//

#ifndef LOOM_DIALECT_LOOM_IR_LOOMINTERFACES_TD
#define LOOM_DIALECT_LOOM_IR_LOOMINTERFACES_TD

include "mlir/IR/OpBase.td"

def Loom_CostOpInterface : OpInterface<"CostOpInterface"> {
  let cppNamespace = "::mlir::loom";
  let description = [{
    The forward cost of one execution of the op on the shapes it carries:
    floating-point operations (a multiply-add counts 2) and bytes moved to
    and from memory by a straightforward kernel (each operand read once,
    each result written once; views move nothing). Used by the model
    summary, the pipeline balancer and the roofline step-time estimate.
  }];
  let methods = [
    InterfaceMethod<"Floating-point operations of one forward execution.",
      "int64_t", "getFlops">,
    InterfaceMethod<"Bytes read plus bytes written by one forward execution.",
      "int64_t", "getBytesAccessed">
  ];
}

def Loom_GradientOpInterface : OpInterface<"GradientOpInterface"> {
  let cppNamespace = "::mlir::loom";
  let description = [{
    The op's gradient rule: given the gradients of its results, build the
    gradients of its differentiable operands at the builder's insertion
    point (a null Value for an operand that has none, such as token ids).
    Implemented by every differentiable op when `--loom-autodiff` lands.
  }];
  let methods = [
    InterfaceMethod<"Build the operand gradients from the result gradients.",
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::OpBuilder &":$builder,
           "::mlir::ValueRange":$resultGrads,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

def Loom_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::loom";
  let description = [{
    The op's sharding rule: which dimensions of its operands and results
    may be split together, and which splits leave partial sums (contracted
    dimensions). Propagation and the partitioner read only this rule.
    The rule is factor-based (as Shardy's OpShardingRule): every dimension
    of every operand and result is one factor, or none (it must stay whole).
    Dimensions that share a factor are split the same way; a reduction
    factor appears only in operands, and splitting it leaves the results
    holding partial sums over the splitting axes.
  }];
  let methods = [
    InterfaceMethod<"The op's factor-based sharding rule.",
      "::mlir::loom::ShardingRule", "getShardingRule">
  ];
}

def Loom_VocabMaskOpInterface : OpInterface<"VocabMaskOpInterface"> {
  let cppNamespace = "::mlir::loom";
  let description = [{
    A loss op reading logits whose last dimension may be a padded
    vocabulary: with `vocab_size` set, the columns from that global index on
    are padding it masks (out of the maximum and the sums, zero gradient).
    Vocabulary padding (VocabPadding.h) sets `vocab_size` through this
    interface, lets the padding pass through the op (the logits' last
    dimension, and the padded result of a gradient op), and the program
    emitter checks it against the model's vocabulary.
  }];
  let methods = [
    InterfaceMethod<"The logits whose last dimension is the vocabulary.",
      "::mlir::Value", "getMaskedLogits", (ins), [{}],
      [{ return $_op.getLogits(); }]>,
    InterfaceMethod<"The result padded like the logits' last dimension "
                    "(a logits gradient), or null.",
      "::mlir::Value", "getPaddedResult", (ins), [{}],
      [{ return ::mlir::Value(); }]>,
    // The ops' own `vocab_size` accessors (the defaults call them).
    InterfaceMethod<"The first padding column, when the logits are padded.",
      "::mlir::IntegerAttr", "getVocabSizeAttr", (ins), [{}],
      [{ return $_op.getVocabSizeAttr(); }]>,
    InterfaceMethod<"Sets the first padding column.",
      "void", "setVocabSizeAttr", (ins "::mlir::IntegerAttr":$vocabSize),
      [{}], [{ $_op.setVocabSizeAttr(vocabSize); }]>
  ];
}

#endif // LOOM_DIALECT_LOOM_IR_LOOMINTERFACES_TD
