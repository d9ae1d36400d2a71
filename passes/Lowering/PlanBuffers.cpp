//===- PlanBuffers.cpp - Static arena offsets from liveness ----*- C++ -*-===//
//
// `--loom-plan-buffers`: one arena per rank, planned before launch, so the
// memory a run needs is known (and checked) before it starts, and the
// runtime never allocates in the step.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/ExecutionOrder.h"
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "loom-plan-buffers"

namespace mlir::loom {
#define GEN_PASS_DEF_LOOMPLANBUFFERS
#include "passes/Passes.h.inc"
} // namespace mlir::loom

using namespace mlir;
using namespace mlir::loom;

namespace {

/// One allocation: a tensor's storage or an op's scratch.
struct Allocation {
  int64_t bytes = 0;
  /// Execution positions of the first write and last read (inclusive).
  int64_t start = 0;
  int64_t end = 0;
  int64_t offset = -1;
};

int64_t bytesOf(Type type) {
  auto tensor = cast<RankedTensorType>(type);
  int64_t width = std::max<int64_t>(1, (tensor.getElementTypeBitWidth() + 7) / 8);
  return tensor.getNumElements() * width;
}

int64_t alignTo(int64_t value, int64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

/// Places `transient` allocations above `base`: largest first, each at the
/// lowest aligned offset that overlaps no placed allocation alive at the
/// same time. Returns the end of the highest allocation.
int64_t placeBestFit(SmallVectorImpl<Allocation *> &transient, int64_t base,
                     int64_t alignment) {
  llvm::stable_sort(transient, [](Allocation *a, Allocation *b) {
    return a->bytes != b->bytes ? a->bytes > b->bytes : a->start < b->start;
  });
  int64_t top = base;
  SmallVector<Allocation *> placed;
  for (Allocation *alloc : transient) {
    SmallVector<Allocation *> conflicts;
    for (Allocation *other : placed)
      if (other->start <= alloc->end && alloc->start <= other->end)
        conflicts.push_back(other);
    llvm::sort(conflicts, [](Allocation *a, Allocation *b) {
      return a->offset < b->offset;
    });
    int64_t offset = base;
    for (Allocation *other : conflicts) {
      if (offset + alloc->bytes <= other->offset)
        break;
      offset = std::max(offset, alignTo(other->offset + other->bytes,
                                        alignment));
    }
    alloc->offset = offset;
    top = std::max(top, offset + alloc->bytes);
    placed.push_back(alloc);
  }
  return top;
}

struct LoomPlanBuffersPass
    : mlir::loom::impl::LoomPlanBuffersBase<LoomPlanBuffersPass> {
  using Base::Base;

  void runOnOperation() override {
    if (alignment < 1 || (alignment & (alignment - 1)) != 0) {
      getOperation().emitError()
          << "loom-plan-buffers: alignment must be a power of two, got "
          << static_cast<int64_t>(alignment);
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<func::FuncOp>())
      if (!func.isExternal() && failed(plan(func)))
        return signalPassFailure();
  }

  LogicalResult plan(func::FuncOp func) {
    FailureOr<ExecutionOrder> order = linearize(func);
    if (failed(order))
      return failure();
    const int64_t last = static_cast<int64_t>(order->ops.size());

    // 1. Live ranges: one allocation per storage-owning value, plus scratch.
    llvm::MapVector<Value, Allocation> storage;
    std::vector<SmallVector<Allocation>> scratch(order->ops.size());
    for (BlockArgument arg : func.getArguments())
      storage[arg] = {bytesOf(arg.getType()), -1, last, -1};
    for (auto [pos, op] : llvm::enumerate(order->ops)) {
      int64_t p = static_cast<int64_t>(pos);
      for (Value operand : op->getOperands())
        if (auto it = storage.find(order->storage(operand));
            it != storage.end())
          it->second.end = std::max(it->second.end, p);
      if (isView(op))
        continue;
      for (Value result : op->getResults())
        storage[result] = {bytesOf(result.getType()), p, p, -1};
      for (RankedTensorType type : getScratchTypes(op))
        scratch[pos].push_back({bytesOf(type), p, p, -1});
    }
    for (Value v : order->returned)
      if (auto it = storage.find(order->storage(v)); it != storage.end())
        it->second.end = last;

    // 2. Arguments (parameters, inputs, targets) live for the whole step and
    //    sit at the bottom of the arena in argument order.
    int64_t top = 0;
    SmallVector<Allocation *> transient;
    for (auto &[value, alloc] : storage) {
      if (isa<BlockArgument>(value)) {
        alloc.offset = top;
        top = alignTo(top + alloc.bytes, alignment);
      } else {
        transient.push_back(&alloc);
      }
    }
    for (auto &allocs : scratch)
      for (Allocation &alloc : allocs)
        transient.push_back(&alloc);
    int64_t argumentBytes = top;
    int64_t naive = argumentBytes;
    for (Allocation *alloc : transient)
      naive += alignTo(alloc->bytes, alignment);
    top = alignTo(placeBestFit(transient, top, alignment), alignment);
    LLVM_DEBUG(llvm::dbgs() << func.getSymName() << ": arena " << top
                            << " bytes (arguments " << argumentBytes
                            << ", without reuse " << naive << ")\n");

    // 3. Annotate the IR.
    Builder b(func.getContext());
    for (BlockArgument arg : func.getArguments())
      func.setArgAttr(arg.getArgNumber(), LoomDialect::kOffsetAttr,
                      b.getI64IntegerAttr(storage[arg].offset));
    for (auto [pos, op] : llvm::enumerate(order->ops)) {
      SmallVector<int64_t> offsets;
      for (Value result : op->getResults())
        offsets.push_back(storage[order->storage(result)].offset);
      op->setAttr(LoomDialect::kOffsetsAttr, b.getDenseI64ArrayAttr(offsets));
      if (scratch[pos].empty())
        continue;
      SmallVector<int64_t> scratchOffsets;
      for (const Allocation &alloc : scratch[pos])
        scratchOffsets.push_back(alloc.offset);
      op->setAttr(LoomDialect::kScratchOffsetsAttr,
                  b.getDenseI64ArrayAttr(scratchOffsets));
    }
    func->setAttr(LoomDialect::kArenaBytesAttr, b.getI64IntegerAttr(top));
    return success();
  }
};

} // namespace
