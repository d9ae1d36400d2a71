//===- LoomAttrs.cpp - Mesh, sharding and init attributes -------*- C++ -*-===//
//
// Parsing, printing and verification of the dialect's attributes, and the
// checks the dialect runs on the discardable attributes it owns
// (`loom.name`, `loom.role`, `loom.init`, `loom.sharding`, `loom.shardings`,
// `loom.model`).
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace mlir::loom;

#define GET_ATTRDEF_CLASSES
#include "dialects/Loom/IR/LoomAttrs.cpp.inc"

void LoomDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/Loom/IR/LoomAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Axis lists: `[dp, tp]`
//===----------------------------------------------------------------------===//

ParseResult mlir::loom::parseAxisList(AsmParser &parser,
                                     SmallVectorImpl<Attribute> &axes) {
  return parser.parseCommaSeparatedList(
      AsmParser::Delimiter::Square, [&]() -> ParseResult {
        std::string name;
        if (parser.parseKeywordOrString(&name))
          return failure();
        axes.push_back(parser.getBuilder().getStringAttr(name));
        return success();
      });
}

void mlir::loom::printAxisList(AsmPrinter &printer, ArrayAttr axes) {
  printer << '[';
  llvm::interleaveComma(axes, printer, [&](Attribute axis) {
    printer.printKeywordOrString(cast<StringAttr>(axis).getValue());
  });
  printer << ']';
}

//===----------------------------------------------------------------------===//
// InitAttr
//===----------------------------------------------------------------------===//

Attribute InitAttr::parse(AsmParser &parser, Type) {
  std::string kindName;
  SMLoc loc = parser.getCurrentLocation();
  if (parser.parseLess() || parser.parseKeywordOrString(&kindName))
    return {};
  std::optional<InitKind> kind = symbolizeInitKind(kindName);
  if (!kind) {
    parser.emitError(loc, "unknown initializer '")
        << kindName << "' (expected normal, zeros or ones)";
    return {};
  }
  double std = 0.0;
  if (*kind == InitKind::Normal) {
    if (parser.parseComma() || parser.parseKeyword("std") ||
        parser.parseEqual() || parser.parseFloat(std))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<InitAttr>(loc, parser.getContext(), *kind,
                                     llvm::APFloat(std));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << '<' << stringifyInitKind(getKind());
  if (getKind() == InitKind::Normal) {
    printer << ", std = ";
    printer.printFloat(getStd());
  }
  printer << '>';
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               InitKind kind, llvm::APFloat stdValue) {
  double std = stdValue.convertToDouble();
  if (kind == InitKind::Normal && !(std > 0.0 && std < 1e30))
    return emitError() << "normal initializer needs a positive finite std, got "
                       << std;
  if (kind != InitKind::Normal && std != 0.0)
    return emitError() << "only the normal initializer takes a std";
  return success();
}

//===----------------------------------------------------------------------===//
// MeshAttr
//===----------------------------------------------------------------------===//

Attribute MeshAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  SmallVector<StringAttr> names;
  SmallVector<int64_t> sizes;
  if (parser.parseLess())
    return {};
  if (parser.parseCommaSeparatedList([&]() -> ParseResult {
        std::string name;
        int64_t size = 0;
        if (parser.parseKeywordOrString(&name) || parser.parseEqual() ||
            parser.parseInteger(size))
          return failure();
        names.push_back(parser.getBuilder().getStringAttr(name));
        sizes.push_back(size);
        return success();
      }))
    return {};
  if (parser.parseGreater())
    return {};
  return parser.getChecked<MeshAttr>(loc, parser.getContext(), names, sizes);
}

void MeshAttr::print(AsmPrinter &printer) const {
  printer << '<';
  for (auto [i, name] : llvm::enumerate(getAxisNames())) {
    if (i)
      printer << ", ";
    printer.printKeywordOrString(name.getValue());
    printer << " = " << getAxisSizes()[i];
  }
  printer << '>';
}

LogicalResult MeshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               ArrayRef<StringAttr> names,
                               ArrayRef<int64_t> sizes) {
  if (names.empty())
    return emitError() << "a mesh needs at least one axis";
  if (names.size() != sizes.size())
    return emitError() << "mesh has " << names.size() << " axis names but "
                       << sizes.size() << " sizes";
  llvm::StringSet<> seen;
  int64_t devices = 1;
  for (auto [name, size] : llvm::zip(names, sizes)) {
    if (!name || name.getValue().empty())
      return emitError() << "mesh axis names must be non-empty";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis '" << name.getValue()
                         << "' appears twice";
    if (size < 1)
      return emitError() << "mesh axis '" << name.getValue()
                         << "' has size " << size << "; sizes must be >= 1";
    // Group sizes are products of axis sizes: keep them representable.
    if (llvm::MulOverflow(devices, size, devices))
      return emitError() << "mesh device count overflows 64 bits at axis '"
                         << name.getValue() << "'";
  }
  return success();
}

int64_t MeshAttr::getNumDevices() const {
  int64_t n = 1;
  for (int64_t size : getAxisSizes())
    n *= size;
  return n;
}

std::optional<unsigned> MeshAttr::findAxis(StringRef axis) const {
  for (auto [i, name] : llvm::enumerate(getAxisNames()))
    if (name.getValue() == axis)
      return i;
  return std::nullopt;
}

std::string MeshAttr::axisNamesForDiagnostic() const {
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::interleaveComma(getAxisNames(), os,
                        [&](StringAttr name) { os << name.getValue(); });
  return out;
}

//===----------------------------------------------------------------------===//
// ShardingAttr
//===----------------------------------------------------------------------===//

Attribute ShardingAttr::parse(AsmParser &parser, Type) {
  SMLoc loc = parser.getCurrentLocation();
  StringAttr meshName;
  SmallVector<Attribute> dims;
  SmallVector<Attribute> partial;
  if (parser.parseLess() || parser.parseSymbolName(meshName) ||
      parser.parseComma())
    return {};
  if (parser.parseCommaSeparatedList(
          AsmParser::Delimiter::Square, [&]() -> ParseResult {
            SmallVector<Attribute> axes;
            if (parseAxisList(parser, axes))
              return failure();
            dims.push_back(parser.getBuilder().getArrayAttr(axes));
            return success();
          }))
    return {};
  ReductionKind kind = ReductionKind::Sum;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("partial"))
      return {};
    // `partial = [...]` (sums) or `partial max = [...]`.
    StringRef kindName;
    if (succeeded(parser.parseOptionalKeyword(&kindName))) {
      std::optional<ReductionKind> parsed = symbolizeReductionKind(kindName);
      if (!parsed || (*parsed != ReductionKind::Sum &&
                      *parsed != ReductionKind::Max)) {
        parser.emitError(parser.getCurrentLocation())
            << "partial results combine by sum or max, not '" << kindName
            << "'";
        return {};
      }
      kind = *parsed;
    }
    if (parser.parseEqual() || parseAxisList(parser, partial))
      return {};
  }
  if (parser.parseGreater())
    return {};
  Builder &b = parser.getBuilder();
  return parser.getChecked<ShardingAttr>(
      loc, parser.getContext(), FlatSymbolRefAttr::get(meshName),
      b.getArrayAttr(dims), b.getArrayAttr(partial), kind);
}

void ShardingAttr::print(AsmPrinter &printer) const {
  printer << '<';
  printer.printSymbolName(getMesh().getValue());
  printer << ", [";
  llvm::interleaveComma(getDims(), printer, [&](Attribute axes) {
    printAxisList(printer, cast<ArrayAttr>(axes));
  });
  printer << ']';
  if (!getPartial().empty()) {
    printer << ", partial";
    if (getPartialKind() != ReductionKind::Sum)
      printer << ' ' << stringifyReductionKind(getPartialKind());
    printer << " = ";
    printAxisList(printer, getPartial());
  }
  printer << '>';
}

LogicalResult
ShardingAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                     FlatSymbolRefAttr mesh, ArrayAttr dims,
                     ArrayAttr partial, ReductionKind partialKind) {
  if (!mesh)
    return emitError() << "sharding needs a mesh";
  if (partialKind != ReductionKind::Sum && partialKind != ReductionKind::Max)
    return emitError() << "partial results combine by sum or max, not "
                       << stringifyReductionKind(partialKind);
  llvm::StringSet<> seen;
  auto checkAxis = [&](Attribute axis) -> LogicalResult {
    auto name = dyn_cast<StringAttr>(axis);
    if (!name || name.getValue().empty())
      return emitError() << "sharding axes must be non-empty names";
    if (!seen.insert(name.getValue()).second)
      return emitError() << "mesh axis '" << name.getValue()
                         << "' is used twice in one sharding";
    return success();
  };
  for (Attribute dim : dims) {
    auto axes = dyn_cast<ArrayAttr>(dim);
    if (!axes)
      return emitError() << "each sharding dimension must be a list of axes";
    for (Attribute axis : axes)
      if (failed(checkAxis(axis)))
        return failure();
  }
  for (Attribute axis : partial)
    if (failed(checkAxis(axis)))
      return failure();
  return success();
}

SmallVector<StringRef> ShardingAttr::getDimAxes(unsigned dim) const {
  SmallVector<StringRef> axes;
  for (Attribute axis : cast<ArrayAttr>(getDims()[dim]))
    axes.push_back(cast<StringAttr>(axis).getValue());
  return axes;
}

SmallVector<StringRef> ShardingAttr::getPartialAxes() const {
  SmallVector<StringRef> axes;
  for (Attribute axis : getPartial())
    axes.push_back(cast<StringAttr>(axis).getValue());
  return axes;
}

//===----------------------------------------------------------------------===//
// Sharding vs. a value's type
//===----------------------------------------------------------------------===//

MeshOp mlir::loom::lookupMesh(Operation *from, FlatSymbolRefAttr mesh) {
  for (Operation *scope = from; scope; scope = scope->getParentOp())
    if (scope->hasTrait<OpTrait::SymbolTable>())
      if (auto meshOp = dyn_cast_or_null<MeshOp>(
              SymbolTable::lookupSymbolIn(scope, mesh.getAttr())))
        return meshOp;
  return {};
}

LogicalResult mlir::loom::verifyShardingForType(
    ShardingAttr sharding, Type type, MeshOp meshOp,
    function_ref<InFlightDiagnostic()> emitError) {
  auto tensorType = dyn_cast<RankedTensorType>(type);
  if (!tensorType)
    return emitError() << "a sharding can only describe a ranked tensor, not "
                       << type;
  if (tensorType.getRank() != static_cast<int64_t>(sharding.getRank()))
    return emitError() << "sharding has " << sharding.getRank()
                       << " dimensions but the value " << type << " has rank "
                       << tensorType.getRank();
  MeshAttr mesh = meshOp.getShape();
  auto axisSize = [&](StringRef axis) -> std::optional<int64_t> {
    if (std::optional<unsigned> index = mesh.findAxis(axis))
      return mesh.getAxisSizes()[*index];
    emitError() << "'" << axis << "' is not an axis of mesh @"
                << meshOp.getSymName() << " (axes: "
                << mesh.axisNamesForDiagnostic() << ")";
    return std::nullopt;
  };
  for (unsigned dim = 0; dim < sharding.getRank(); ++dim) {
    int64_t ways = 1;
    for (StringRef axis : sharding.getDimAxes(dim)) {
      std::optional<int64_t> size = axisSize(axis);
      if (!size)
        return failure();
      ways *= *size;
    }
    int64_t extent = tensorType.getDimSize(dim);
    if (extent % ways != 0)
      return emitError() << "dimension " << dim << " of size " << extent
                         << " cannot be split " << ways
                         << " ways; choose axes whose sizes divide it";
  }
  for (StringRef axis : sharding.getPartialAxes())
    if (!axisSize(axis))
      return failure();
  return success();
}

//===----------------------------------------------------------------------===//
// Discardable attributes owned by the dialect
//===----------------------------------------------------------------------===//

/// Checks a sharding attached to a value of type `type` inside `op`.
static LogicalResult verifyAttachedSharding(Operation *op, Attribute attr,
                                            Type type, StringRef what) {
  auto sharding = dyn_cast<ShardingAttr>(attr);
  if (!sharding)
    return op->emitOpError() << what << " must be a #loom.sharding";
  MeshOp meshOp = lookupMesh(op, sharding.getMesh());
  if (!meshOp)
    return op->emitOpError()
           << what << " refers to unknown mesh " << sharding.getMesh()
           << "; declare it with `loom.mesh`";
  return verifyShardingForType(sharding, type, meshOp, [&]() {
    return op->emitOpError() << what << ": ";
  });
}

LogicalResult LoomDialect::verifyRegionArgAttribute(Operation *op,
                                                    unsigned regionIndex,
                                                    unsigned argIndex,
                                                    NamedAttribute attr) {
  std::string what = ("argument #" + Twine(argIndex)).str();
  Type argType;
  DictionaryAttr argAttrs;
  if (auto func = dyn_cast<FunctionOpInterface>(op)) {
    // A declaration has no body: its argument types are in the signature.
    if (argIndex < func.getNumArguments()) {
      argType = func.getArgumentTypes()[argIndex];
      argAttrs = func.getArgAttrDict(argIndex);
    }
  } else {
    Region &region = op->getRegion(regionIndex);
    if (!region.empty() && argIndex < region.getNumArguments())
      argType = region.getArgument(argIndex).getType();
  }
  if (!argType)
    return op->emitOpError() << what << " has attribute '"
                             << attr.getName().getValue()
                             << "' but the region has no such argument";

  StringRef name = attr.getName().getValue();
  if (name == kNameAttr) {
    auto str = dyn_cast<StringAttr>(attr.getValue());
    if (!str || str.getValue().empty())
      return op->emitOpError() << what << ": loom.name must be a non-empty "
                               << "string such as \"h.0.attn.c_attn.weight\"";
    return success();
  }
  if (name == kRoleAttr) {
    auto role = dyn_cast<RoleAttr>(attr.getValue());
    if (!role)
      return op->emitOpError()
             << what << ": loom.role must be #loom.role<param|input|target>";
    auto tensorType = dyn_cast<RankedTensorType>(argType);
    if (!tensorType || !tensorType.hasStaticShape())
      return op->emitOpError()
             << what << " has a loom.role but type " << argType
             << "; roles apply to statically shaped tensors";
    if (role.getValue() == Role::Param) {
      if (!isa<FloatType>(tensorType.getElementType()))
        return op->emitOpError() << what << " is a param of type " << argType
                                 << "; parameters must be float tensors";
      if (!argAttrs || !argAttrs.get(kNameAttr))
        return op->emitOpError() << what << " is a param without a loom.name";
      if (!argAttrs.get(kInitAttr))
        return op->emitOpError()
               << what << " (" << argAttrs.get(kNameAttr)
               << ") is a param without a loom.init initializer";
      return success();
    }
    switch (role.getValue()) {
    case Role::Input:
    case Role::Target:
      if (!tensorType.getElementType().isSignlessInteger(32))
        return op->emitOpError()
               << what << " is an " << stringifyRole(role.getValue())
               << " of type " << argType << "; token ids must be i32 tensors";
      return success();
    case Role::Grad:
    case Role::AdamM:
    case Role::AdamV:
      if (!isa<FloatType>(tensorType.getElementType()) || !argAttrs ||
          !argAttrs.get(kNameAttr))
        return op->emitOpError()
               << what << " is " << stringifyRole(role.getValue())
               << " state; it must be a float tensor named after its "
                  "parameter (loom.name)";
      return success();
    case Role::Master:
      // The fp32 copy AdamW updates; the bf16 parameter is cast from it.
      if (!tensorType.getElementType().isF32() || !argAttrs ||
          !argAttrs.get(kNameAttr))
        return op->emitOpError()
               << what
               << " holds master weights; they must be an f32 tensor "
                  "named after their parameter (loom.name), not "
               << argType;
      return success();
    case Role::LearningRate:
    case Role::Step:
      if (tensorType.getRank() != 0 ||
          !isa<FloatType>(tensorType.getElementType()))
        return op->emitOpError()
               << what << " is the " << stringifyRole(role.getValue())
               << " scalar; it must be tensor<f32>, not " << argType;
      return success();
    case Role::Stash:
      if (!argAttrs || !argAttrs.get(kNameAttr))
        return op->emitOpError() << what << " is a stashed activation "
                                            "without a loom.name";
      return success();
    case Role::Param:
      break;
    }
    return success();
  }
  if (name == kInitAttr) {
    if (!isa<InitAttr>(attr.getValue()))
      return op->emitOpError() << what << ": loom.init must be a #loom.init";
    auto role = argAttrs ? argAttrs.getAs<RoleAttr>(kRoleAttr) : RoleAttr();
    if (!role || role.getValue() != Role::Param)
      return op->emitOpError()
             << what << " has an initializer but is not a param";
    return success();
  }
  if (name == kCheckpointShapeAttr) {
    auto array = dyn_cast<ArrayAttr>(attr.getValue());
    SmallVector<int64_t> shape;
    for (Attribute size : array ? array.getValue() : ArrayRef<Attribute>()) {
      auto integer = dyn_cast<IntegerAttr>(size);
      if (!integer || integer.getValue().getSignificantBits() > 64 ||
          integer.getValue().getSExtValue() < 1) {
        shape.clear();
        break;
      }
      shape.push_back(integer.getValue().getSExtValue());
    }
    if (shape.empty())
      return op->emitOpError()
             << what << ": loom.checkpoint_shape must be a list of positive "
                        "sizes such as [768, 2304]";
    auto role = argAttrs ? argAttrs.getAs<RoleAttr>(kRoleAttr) : RoleAttr();
    if (!role || role.getValue() != Role::Param)
      return op->emitOpError()
             << what << " has a checkpoint shape but is not a param";
    // Partitioned: the type is local, its element count a share.
    auto type = dyn_cast<RankedTensorType>(argType);
    int64_t elements = 1;
    for (int64_t d : shape)
      if (__builtin_mul_overflow(elements, d, &elements))
        return op->emitOpError() << what << ": loom.checkpoint_shape overflows "
                                            "64-bit element counts";
    if (!op->hasAttr(kPartitionedAttr) && type &&
        type.getNumElements() != elements)
      return op->emitOpError()
             << what << " of type " << argType << " has checkpoint shape ["
             << ArrayRef<int64_t>(shape) << "] of " << elements
             << " elements; a checkpoint shape only regroups the same "
                "row-major elements";
    return success();
  }
  if (name == kUnpaddedRowsAttr) {
    auto rows = dyn_cast<IntegerAttr>(attr.getValue());
    auto type = dyn_cast<RankedTensorType>(argType);
    if (!rows || rows.getValue().getSignificantBits() > 64 ||
        rows.getValue().getSExtValue() < 1)
      return op->emitOpError()
             << what << ": loom.unpadded_rows must be a positive integer (the "
                        "real row count of a padded param)";
    auto role = argAttrs ? argAttrs.getAs<RoleAttr>(kRoleAttr) : RoleAttr();
    if (!role || role.getValue() != Role::Param)
      return op->emitOpError()
             << what << " has loom.unpadded_rows but is not a param";
    if (argAttrs.get(kCheckpointShapeAttr))
      return op->emitOpError()
             << what << " has both loom.unpadded_rows and "
                        "loom.checkpoint_shape; a padded param is saved with "
                        "its real rows, not regrouped";
    // Partitioned: the type is this rank's block of the padded rows.
    if (!type || type.getRank() < 1 ||
        (!op->hasAttr(kPartitionedAttr) &&
         rows.getInt() > type.getDimSize(0)))
      return op->emitOpError()
             << what << " of type " << argType << " has loom.unpadded_rows = "
             << rows.getInt()
             << "; it must be a tensor with at least that many rows (the "
                "padding follows the real rows)";
    return success();
  }
  if (name == kShardingAttr) {
    // In a partitioned function the type is local and the sharding global:
    // the global shape is the local one times the splits, so only the axes
    // and the rank are checked.
    if (op->hasAttr(kPartitionedAttr)) {
      auto sharding = dyn_cast<ShardingAttr>(attr.getValue());
      auto type = dyn_cast<RankedTensorType>(argType);
      MeshOp meshOp = sharding ? lookupMesh(op, sharding.getMesh()) : MeshOp();
      if (!sharding || !type || !meshOp ||
          sharding.getRank() != static_cast<unsigned>(type.getRank()))
        return op->emitOpError()
               << what << " sharding must be a #loom.sharding of the "
                          "argument's rank on a declared mesh";
      for (unsigned d = 0; d < sharding.getRank(); ++d)
        for (StringRef axis : sharding.getDimAxes(d))
          if (!meshOp.getShape().findAxis(axis))
            return op->emitOpError() << what << " sharding names unknown axis '"
                                     << axis << "'";
      return success();
    }
    return verifyAttachedSharding(op, attr.getValue(), argType,
                                  what + " sharding");
  }
  if (name == kOffsetAttr) {
    auto offset = dyn_cast<IntegerAttr>(attr.getValue());
    if (!offset || offset.getInt() < 0)
      return op->emitOpError()
             << what << ": loom.offset must be a non-negative byte offset";
    return success();
  }
  return op->emitOpError() << "unknown loom argument attribute '" << name
                           << "'";
}

LogicalResult LoomDialect::verifyRegionResultAttribute(Operation *op,
                                                       unsigned regionIndex,
                                                       unsigned resultIndex,
                                                       NamedAttribute attr) {
  if (attr.getName().getValue() == kStashAttr) {
    auto name = dyn_cast<StringAttr>(attr.getValue());
    if (!name || name.getValue().empty() || !isa<FunctionOpInterface>(op))
      return op->emitOpError() << "result #" << resultIndex
                               << ": loom.stash must name a stash argument";
    return success();
  }
  if (attr.getName().getValue() != kUpdatesAttr)
    return op->emitOpError() << "unknown loom result attribute '"
                             << attr.getName().getValue() << "'";
  auto func = dyn_cast<FunctionOpInterface>(op);
  auto index = dyn_cast<IntegerAttr>(attr.getValue());
  if (!func || !index || index.getInt() < 0 ||
      index.getInt() >= static_cast<int64_t>(func.getNumArguments()))
    return op->emitOpError() << "result #" << resultIndex
                             << ": loom.updates must name an argument index";
  if (func.getResultTypes()[resultIndex] !=
      func.getArgumentTypes()[index.getInt()])
    return op->emitOpError() << "result #" << resultIndex
                             << " updates argument #" << index.getInt()
                             << " in place but their types differ";
  return success();
}

/// Checks that the parameter names of a model function are unique.
static LogicalResult verifyModelFunction(Operation *op) {
  auto func = dyn_cast<FunctionOpInterface>(op);
  if (!func)
    return op->emitOpError() << "loom.model belongs on a function";
  llvm::StringMap<unsigned> seen;
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i) {
    auto name = func.getArgAttrOfType<StringAttr>(i, LoomDialect::kNameAttr);
    if (!name)
      continue;
    // Training state shares its parameter's name; names are unique per role.
    auto role = func.getArgAttrOfType<RoleAttr>(i, LoomDialect::kRoleAttr);
    std::string key = (role ? stringifyRole(role.getValue()).str() : "") +
                      ":" + name.getValue().str();
    auto [it, inserted] = seen.try_emplace(key, i);
    if (!inserted)
      return op->emitOpError()
             << "arguments #" << it->second << " and #" << i
             << " have the same loom.name \"" << name.getValue() << "\"";
  }
  return success();
}

LogicalResult LoomDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name == kModelAttr) {
    if (!isa<DictionaryAttr>(attr.getValue()))
      return op->emitOpError()
             << "loom.model must be a dictionary of the model configuration";
    return verifyModelFunction(op);
  }
  if (name == kShardingsAttr) {
    auto shardings = dyn_cast<ArrayAttr>(attr.getValue());
    if (!shardings || shardings.size() != op->getNumResults())
      return op->emitOpError()
             << "loom.shardings must list one #loom.sharding per result ("
             << op->getNumResults() << ")";
    for (auto [i, sharding] : llvm::enumerate(shardings))
      if (failed(verifyAttachedSharding(op, sharding,
                                        op->getResult(i).getType(),
                                        ("result #" + Twine(i)).str())))
        return failure();
    return success();
  }
  if (name == kOffsetsAttr || name == kScratchOffsetsAttr) {
    auto offsets = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
    if (!offsets || llvm::any_of(offsets.asArrayRef(),
                                 [](int64_t o) { return o < 0; }))
      return op->emitOpError() << name
                               << " must be an array of non-negative byte "
                                  "offsets";
    if (name == kOffsetsAttr && offsets.size() != op->getNumResults())
      return op->emitOpError()
             << "loom.offsets has " << offsets.size() << " entries for "
             << op->getNumResults() << " results";
    return success();
  }
  if (name == kArenaBytesAttr || name == kStashBytesAttr) {
    auto bytes = dyn_cast<IntegerAttr>(attr.getValue());
    if (!bytes || bytes.getInt() < 0 || !isa<FunctionOpInterface>(op))
      return op->emitOpError() << name << " must be a non-negative "
                                          "integer on a function";
    return success();
  }
  if (name == kInStashAttr) {
    auto flags = dyn_cast<DenseBoolArrayAttr>(attr.getValue());
    if (!flags || flags.size() != static_cast<int64_t>(op->getNumResults()))
      return op->emitOpError()
             << "loom.in_stash must be an array<i1> of one flag per result ("
             << op->getNumResults() << ")";
    return success();
  }
  if (name == kPartitionedAttr) {
    if (!isa<UnitAttr>(attr.getValue()) || !isa<FunctionOpInterface>(op))
      return op->emitOpError() << "loom.partitioned must be a unit attribute "
                                  "on a function";
    return success();
  }
  if (name == kTrainAttr) {
    auto train = dyn_cast<DictionaryAttr>(attr.getValue());
    auto phase = train ? train.getAs<StringAttr>("phase") : StringAttr();
    if (!isa<FunctionOpInterface>(op) || !phase ||
        !llvm::is_contained({"microbatch", "update", "forward", "backward"},
                            phase.getValue()))
      return op->emitOpError() << "loom.train must be a dictionary on a "
                                  "function with phase = \"microbatch\", "
                                  "\"update\", \"forward\" or \"backward\"";
    if (auto m = train.get("microbatches")) {
      auto count = dyn_cast<IntegerAttr>(m);
      if (!count || count.getInt() < 1)
        return op->emitOpError() << "loom.train microbatches must be a "
                                    "positive integer";
    }
    return success();
  }
  if (name == kCostModelAttr) {
    auto machine = dyn_cast<DictionaryAttr>(attr.getValue());
    auto positive = [&](StringRef key) {
      auto value = machine ? machine.getAs<FloatAttr>(key) : FloatAttr();
      return value && value.getValueAsDouble() > 0;
    };
    if (!isa<PipelineScheduleOp>(op) || !positive("peak_tflops") ||
        !positive("bandwidth_gbs"))
      return op->emitOpError()
             << "loom.cost_model must be {peak_tflops = F, bandwidth_gbs = "
                "F} with positive values, on a loom.pipeline_schedule";
    return success();
  }
  if (name == kPipelineAttr) {
    auto stage = dyn_cast<DictionaryAttr>(attr.getValue());
    auto index = stage ? stage.getAs<IntegerAttr>("stage") : IntegerAttr();
    if (!isa<FunctionOpInterface>(op) || !index || index.getInt() < 0)
      return op->emitOpError() << "loom.pipeline must be a dictionary on a "
                                  "function with a stage index >= 0";
    return success();
  }
  return op->emitOpError() << "unknown loom attribute '" << name << "'";
}

std::optional<SmallVector<int64_t>>
mlir::loom::getCheckpointShape(func::FuncOp func, unsigned arg) {
  auto array = func.getArgAttrOfType<ArrayAttr>(arg,
                                                LoomDialect::kCheckpointShapeAttr);
  if (!array)
    return std::nullopt;
  SmallVector<int64_t> shape;
  for (Attribute size : array)
    shape.push_back(cast<IntegerAttr>(size).getInt());
  return shape;
}
