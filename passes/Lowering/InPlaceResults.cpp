//===- InPlaceResults.cpp - Results over dying operands ---------*- C++ -*-===//
//
// See InPlaceResults.h.
//
//===----------------------------------------------------------------------===//

#include "passes/Lowering/InPlaceResults.h"

#include "passes/Lowering/ProgramEmitter.h"
#include "runtime/program/in_place.h"

using namespace mlir;
using namespace mlir::loom;

Value mlir::loom::inPlaceOperand(Operation *op) {
  std::optional<::loom::program::Opcode> opcode = opcodeOf(op);
  // Not the GELU forward (InPlaceResults.h).
  if (!opcode || *opcode == ::loom::program::Opcode::Gelu)
    return Value();
  for (auto [k, operand] : llvm::enumerate(op->getOperands()))
    if (::loom::program::outputMayOverwriteInput(*opcode, k))
      return operand;
  return Value();
}

int64_t
mlir::loom::shareDyingOperands(ExecutionOrder &order,
                               llvm::MapVector<Value, Allocation> &transient) {
  // Result storage -> the storage it moved into. A chain (a result written
  // over an operand that was itself written over another) ends at the
  // first storage of the chain.
  llvm::DenseMap<Value, Value> movedTo;
  auto rootOf = [&](Value v) {
    v = order.storage(v);
    for (auto it = movedTo.find(v); it != movedTo.end(); it = movedTo.find(v))
      v = it->second;
    return v;
  };
  for (auto [pos, op] : llvm::enumerate(order.ops)) {
    Value operand = inPlaceOperand(op);
    if (!operand || op->getNumResults() != 1)
      continue;
    Value result = op->getResult(0);
    Value from = rootOf(operand);
    auto source = transient.find(from), target = transient.find(result);
    if (source == transient.end() || target == transient.end() ||
        order.storage(result) != result ||
        operand.getType() != result.getType())
      continue;
    Allocation &dying = source->second, &written = target->second;
    if (dying.end != static_cast<int64_t>(pos) || dying.bytes != written.bytes)
      continue;
    // Only this operand may be the result's bytes: the kernel would read
    // another operand stored there after writing over it (add x, x).
    if (llvm::count_if(op->getOperands(),
                       [&](Value v) { return rootOf(v) == from; }) != 1)
      continue;
    dying.end = std::max(dying.end, written.end);
    movedTo[result] = from;
  }
  if (movedTo.empty())
    return 0;
  transient.remove_if([&](const std::pair<Value, Allocation> &entry) {
    return movedTo.count(entry.first);
  });
  // Views and block values stored in a moved result follow it.
  for (auto &[value, storage] : order.storageOf)
    storage = rootOf(storage);
  for (auto &[result, from] : movedTo)
    order.storageOf[result] = rootOf(from);
  return static_cast<int64_t>(movedTo.size());
}
