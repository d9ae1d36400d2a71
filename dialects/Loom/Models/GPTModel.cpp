//===- GPTModel.cpp - GPT-2 model IR from a configuration -------*- C++ -*-===//
//
// The graph follows HF GPT-2 / nanoGPT exactly (pre-norm blocks, tanh GELU,
// tied LM head), so checkpoints in HF layout map one to one onto the
// parameters and a PyTorch reference computes the same loss.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/Models/GPTModel.h"

#include "dialects/Loom/IR/LoomOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/Support/JSON.h"

#include <cmath>

using namespace mlir;
using namespace mlir::loom;

//===----------------------------------------------------------------------===//
// Configuration
//===----------------------------------------------------------------------===//

static llvm::Error configError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 message.str());
}

llvm::Error mlir::loom::validateGPTConfig(const GPTConfig &c) {
  struct Field {
    const char *name;
    int64_t value;
  } fields[] = {{"n_layer", c.nLayer},     {"n_head", c.nHead},
                {"n_embd", c.nEmbd},       {"vocab_size", c.vocabSize},
                {"n_positions", c.nPositions}, {"batch", c.batch},
                {"seq", c.seq}};
  for (const Field &f : fields)
    if (f.value < 1)
      return configError(llvm::Twine("'") + f.name + "' must be >= 1, got " +
                         llvm::Twine(f.value));
  // Guard against configs that would build millions of ops by mistake; the
  // deepest published dense models have ~100-200 layers.
  constexpr int64_t kMaxLayers = 4096;
  if (c.nLayer > kMaxLayers)
    return configError("n_layer " + llvm::Twine(c.nLayer) + " exceeds " +
                       llvm::Twine(kMaxLayers) +
                       "; is the config's n_layer a typo?");
  if (c.nEmbd % c.nHead != 0)
    return configError("n_embd " + llvm::Twine(c.nEmbd) +
                       " is not divisible by n_head " + llvm::Twine(c.nHead) +
                       "; every head needs n_embd / n_head channels");
  if (c.seq > c.nPositions)
    return configError("sequence length " + llvm::Twine(c.seq) +
                       " exceeds n_positions " + llvm::Twine(c.nPositions) +
                       "; pass a shorter --seq");
  if (!(c.layerNormEpsilon > 0.0 && c.layerNormEpsilon < 1.0))
    return configError("'layer_norm_epsilon' must be in (0, 1)");
  if (!(c.initializerRange > 0.0 && c.initializerRange < 1e30))
    return configError("'initializer_range' must be positive");
  // Keep every tensor addressable with 64-bit element counts: the largest is
  // the logits, batch * seq * vocab.
  double logits = double(c.batch) * double(c.seq) * double(c.vocabSize);
  double embedding = double(c.vocabSize) * double(c.nEmbd);
  if (logits > 9e18 || embedding > 9e18 ||
      double(c.nEmbd) * double(c.nEmbd) * 4.0 > 9e18)
    return configError("model or batch is too large: tensor sizes overflow "
                       "64-bit element counts");
  return llvm::Error::success();
}

llvm::Expected<GPTConfig> mlir::loom::parseGPTConfig(llvm::StringRef text,
                                                     int64_t batch,
                                                     int64_t seq) {
  llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(text);
  if (!parsed)
    return configError("config is not valid JSON: " +
                       llvm::toString(parsed.takeError()));
  const llvm::json::Object *root = parsed->getAsObject();
  if (!root)
    return configError("config must be a JSON object such as "
                       "{\"n_layer\": 12, \"n_head\": 12, ...}");

  auto getInt = [&](llvm::StringRef key,
                    std::optional<llvm::StringRef> alias =
                        std::nullopt) -> llvm::Expected<int64_t> {
    const llvm::json::Value *v = root->get(key);
    if (!v && alias)
      v = root->get(*alias);
    if (!v)
      return configError("config has no '" + key + "'" +
                         (alias ? " (or '" + *alias + "')" : llvm::Twine()) +
                         "; it is required for a GPT-2 model");
    std::optional<int64_t> i = v->getAsInteger();
    if (!i)
      return configError("config field '" + key + "' must be an integer");
    return *i;
  };
  auto getDouble = [&](llvm::StringRef key,
                       double fallback) -> llvm::Expected<double> {
    const llvm::json::Value *v = root->get(key);
    if (!v)
      return fallback;
    std::optional<double> d = v->getAsNumber();
    if (!d)
      return configError("config field '" + key + "' must be a number");
    return *d;
  };

  GPTConfig c;
  if (llvm::Error e = getInt("n_layer").moveInto(c.nLayer))
    return std::move(e);
  if (llvm::Error e = getInt("n_head").moveInto(c.nHead))
    return std::move(e);
  if (llvm::Error e = getInt("n_embd").moveInto(c.nEmbd))
    return std::move(e);
  if (llvm::Error e = getInt("vocab_size").moveInto(c.vocabSize))
    return std::move(e);
  if (llvm::Error e =
          getInt("n_positions", llvm::StringRef("n_ctx")).moveInto(c.nPositions))
    return std::move(e);
  if (llvm::Error e =
          getDouble("layer_norm_epsilon", 1e-5).moveInto(c.layerNormEpsilon))
    return std::move(e);
  if (llvm::Error e =
          getDouble("initializer_range", 0.02).moveInto(c.initializerRange))
    return std::move(e);
  c.batch = batch;
  c.seq = seq == 0 ? c.nPositions : seq;
  if (llvm::Error e = validateGPTConfig(c))
    return std::move(e);
  return c;
}

//===----------------------------------------------------------------------===//
// Graph construction
//===----------------------------------------------------------------------===//

namespace {

/// One function argument of the model.
struct ModelArg {
  std::string name;
  RankedTensorType type;
  Role role;
  InitAttr init; // null for inputs and targets
  /// The HF tensor's shape when `type` regroups its dimensions (empty: the
  /// type's shape).
  SmallVector<int64_t> checkpointShape;
};

/// Builds the model function; keeps the builder, types and argument table.
class GPTBuilder {
public:
  GPTBuilder(MLIRContext *context, const GPTConfig &config)
      : ctx(context), c(config), b(context) {}

  OwningOpRef<ModuleOp> build();

private:
  RankedTensorType f32(ArrayRef<int64_t> shape) {
    return RankedTensorType::get(shape, b.getF32Type());
  }
  Location loc(const Twine &name) {
    return NameLoc::get(b.getStringAttr(name));
  }
  void addParam(const std::string &name, ArrayRef<int64_t> shape,
                InitAttr init, ArrayRef<int64_t> checkpointShape = {}) {
    args.push_back({name, f32(shape), Role::Param, init,
                    SmallVector<int64_t>(checkpointShape)});
  }
  void declareArguments();
  Value buildBlock(int64_t layer, Value x,
                   const llvm::StringMap<Value> &params);

  MLIRContext *ctx;
  const GPTConfig &c;
  OpBuilder b;
  SmallVector<ModelArg> args;
};

} // namespace

void GPTBuilder::declareArguments() {
  auto normal = [&](double std) {
    return InitAttr::get(ctx, InitKind::Normal, llvm::APFloat(std));
  };
  InitAttr zeros = InitAttr::get(ctx, InitKind::Zeros, llvm::APFloat(0.0));
  InitAttr ones = InitAttr::get(ctx, InitKind::Ones, llvm::APFloat(0.0));
  double std = c.initializerRange;
  // GPT-2 scales the residual projections by 1/sqrt(2 * n_layer): each block
  // adds two of them to the residual stream.
  double projStd = std / std::sqrt(2.0 * double(c.nLayer));
  int64_t C = c.nEmbd;

  addParam("wte.weight", {c.vocabSize, C}, normal(std));
  addParam("wpe.weight", {c.nPositions, C}, normal(std));
  for (int64_t l = 0; l < c.nLayer; ++l) {
    std::string h = "h." + std::to_string(l) + ".";
    addParam(h + "ln_1.weight", {C}, ones);
    addParam(h + "ln_1.bias", {C}, zeros);
    // HF packs q|k|v along the last dimension ([C, 3C]); the same bytes as
    // [C, 3, C] make q, k and v a dimension of their own, so splitting the
    // heads (the last dimension) over tensor-parallel ranks is a plain split
    // that gives each rank its heads' q, k and v. Checkpoints keep HF's shape.
    addParam(h + "attn.c_attn.weight", {C, 3, C}, normal(std), {C, 3 * C});
    addParam(h + "attn.c_attn.bias", {3, C}, zeros, {3 * C});
    addParam(h + "attn.c_proj.weight", {C, C}, normal(projStd));
    addParam(h + "attn.c_proj.bias", {C}, zeros);
    addParam(h + "ln_2.weight", {C}, ones);
    addParam(h + "ln_2.bias", {C}, zeros);
    addParam(h + "mlp.c_fc.weight", {C, 4 * C}, normal(std));
    addParam(h + "mlp.c_fc.bias", {4 * C}, zeros);
    addParam(h + "mlp.c_proj.weight", {4 * C, C}, normal(projStd));
    addParam(h + "mlp.c_proj.bias", {C}, zeros);
  }
  addParam("ln_f.weight", {C}, ones);
  addParam("ln_f.bias", {C}, zeros);
  auto ids = RankedTensorType::get({c.batch, c.seq}, b.getI32Type());
  args.push_back({"tokens", ids, Role::Input, {}});
  args.push_back({"targets", ids, Role::Target, {}});
}

/// One pre-norm transformer layer as an isolated `loom.block`:
///   x = x + attn(ln_1(x));  x = x + mlp(ln_2(x))
Value GPTBuilder::buildBlock(int64_t layer, Value x,
                             const llvm::StringMap<Value> &params) {
  std::string h = "h." + std::to_string(layer) + ".";
  static const char *kOwned[] = {
      "ln_1.weight",        "ln_1.bias",       "attn.c_attn.weight",
      "attn.c_attn.bias",   "attn.c_proj.weight", "attn.c_proj.bias",
      "ln_2.weight",        "ln_2.bias",       "mlp.c_fc.weight",
      "mlp.c_fc.bias",      "mlp.c_proj.weight", "mlp.c_proj.bias"};
  SmallVector<Value> inputs{x};
  for (const char *name : kOwned)
    inputs.push_back(params.lookup(h + name));

  auto block = BlockOp::create(b, loc("h." + Twine(layer)),
                               TypeRange{x.getType()},
                               b.getStringAttr("h." + Twine(layer)), inputs);
  // The body is built inside; the caller continues after the block.
  OpBuilder::InsertionGuard guard(b);
  Block *body = b.createBlock(&block.getBody());
  llvm::StringMap<Value> p;
  for (auto [i, input] : llvm::enumerate(inputs)) {
    BlockArgument arg = body->addArgument(input.getType(), input.getLoc());
    if (i > 0)
      p[kOwned[i - 1]] = arg;
  }
  b.setInsertionPointToStart(body);

  int64_t B = c.batch, T = c.seq, C = c.nEmbd;
  FloatAttr eps = b.getF64FloatAttr(c.layerNormEpsilon);
  Value in = body->getArgument(0);
  auto act = f32({B, T, C});

  Value ln1 = LayerNormOp::create(b, loc(h + "ln_1"), act, in,
                                  p["ln_1.weight"], p["ln_1.bias"], eps);
  Value qkv = LinearOp::create(b, loc(h + "attn.c_attn"), f32({B, T, 3, C}),
                               ln1, p["attn.c_attn.weight"],
                               p["attn.c_attn.bias"]);
  Value att = AttentionOp::create(b, loc(h + "attn"), act, /*lse=*/Type(), qkv,
                                  b.getI64IntegerAttr(c.nHead))
                  .getResult();
  Value proj = LinearOp::create(b, loc(h + "attn.c_proj"), act, att,
                                p["attn.c_proj.weight"], p["attn.c_proj.bias"]);
  Value res1 = AddOp::create(b, loc(h + "attn.residual"), act, in, proj);
  Value ln2 = LayerNormOp::create(b, loc(h + "ln_2"), act, res1,
                                  p["ln_2.weight"], p["ln_2.bias"], eps);
  Value fc = LinearOp::create(b, loc(h + "mlp.c_fc"), f32({B, T, 4 * C}), ln2,
                              p["mlp.c_fc.weight"], p["mlp.c_fc.bias"]);
  Value gelu = GeluOp::create(b, loc(h + "mlp.gelu"), fc.getType(), fc);
  Value proj2 = LinearOp::create(b, loc(h + "mlp.c_proj"), act, gelu,
                                 p["mlp.c_proj.weight"], p["mlp.c_proj.bias"]);
  Value res2 = AddOp::create(b, loc(h + "mlp.residual"), act, res1, proj2);
  YieldOp::create(b, loc(h + "yield"), ValueRange{res2});
  return block.getResult(0);
}

OwningOpRef<ModuleOp> GPTBuilder::build() {
  ctx->loadDialect<LoomDialect, func::FuncDialect>();
  declareArguments();

  OwningOpRef<ModuleOp> module = ModuleOp::create(loc("gpt2"));
  b.setInsertionPointToEnd(module->getBody());
  SmallVector<Type> argTypes;
  for (const ModelArg &a : args)
    argTypes.push_back(a.type);
  auto lossType = RankedTensorType::get({}, b.getF32Type());
  auto func = func::FuncOp::create(b, loc("gpt2"), "gpt2",
                                   b.getFunctionType(argTypes, {lossType}));
  func->setAttr(LoomDialect::kModelAttr,
                b.getDictionaryAttr({
                    b.getNamedAttr("n_layer", b.getI64IntegerAttr(c.nLayer)),
                    b.getNamedAttr("n_head", b.getI64IntegerAttr(c.nHead)),
                    b.getNamedAttr("n_embd", b.getI64IntegerAttr(c.nEmbd)),
                    b.getNamedAttr("vocab_size",
                                   b.getI64IntegerAttr(c.vocabSize)),
                    b.getNamedAttr("n_positions",
                                   b.getI64IntegerAttr(c.nPositions)),
                    b.getNamedAttr("batch", b.getI64IntegerAttr(c.batch)),
                    b.getNamedAttr("seq", b.getI64IntegerAttr(c.seq)),
                    b.getNamedAttr("layer_norm_epsilon",
                                   b.getF64FloatAttr(c.layerNormEpsilon)),
                }));

  Block *entry = func.addEntryBlock();
  llvm::StringMap<Value> params;
  // All argument attributes at once (setArgAttrs per argument rebuilds the
  // whole list: quadratic in the parameter count).
  SmallVector<DictionaryAttr> argAttrs;
  for (auto [i, a] : llvm::enumerate(args)) {
    SmallVector<NamedAttribute> attrs{
        b.getNamedAttr(LoomDialect::kNameAttr, b.getStringAttr(a.name)),
        b.getNamedAttr(LoomDialect::kRoleAttr, RoleAttr::get(ctx, a.role))};
    if (a.init)
      attrs.push_back(b.getNamedAttr(LoomDialect::kInitAttr, a.init));
    if (!a.checkpointShape.empty())
      attrs.push_back(b.getNamedAttr(LoomDialect::kCheckpointShapeAttr,
                                     b.getI64ArrayAttr(a.checkpointShape)));
    argAttrs.push_back(b.getDictionaryAttr(attrs));
    params[a.name] = entry->getArgument(i);
  }
  func.setAllArgAttrs(argAttrs);
  Value tokens = entry->getArgument(args.size() - 2);
  Value targets = entry->getArgument(args.size() - 1);

  b.setInsertionPointToStart(entry);
  int64_t B = c.batch, T = c.seq, C = c.nEmbd;
  auto act = f32({B, T, C});
  Value tok = EmbeddingOp::create(b, loc("wte"), act, params["wte.weight"],
                                  tokens, /*row_axes=*/nullptr);
  // Positions 0..T-1 are the first T rows of wpe, broadcast over the batch.
  Value pos = SliceOp::create(b, loc("wpe"), f32({T, C}), params["wpe.weight"],
                              b.getI64IntegerAttr(0), b.getI64IntegerAttr(0));
  Value x = AddOp::create(b, loc("embeddings"), act, tok, pos);
  for (int64_t l = 0; l < c.nLayer; ++l)
    x = buildBlock(l, x, params);
  Value h = LayerNormOp::create(b, loc("ln_f"), act, x, params["ln_f.weight"],
                                params["ln_f.bias"],
                                b.getF64FloatAttr(c.layerNormEpsilon));
  // The LM head is the token embedding, transposed (weight tying).
  Value logits = MatmulOp::create(b, loc("lm_head"), f32({B, T, c.vocabSize}),
                                  h, params["wte.weight"], b.getUnitAttr());
  Value loss = CrossEntropyOp::create(b, loc("loss"), lossType, logits,
                                      targets, /*num_tokens=*/nullptr,
                                      /*vocab_size=*/nullptr);
  func::ReturnOp::create(b, loc("return"), ValueRange{loss});
  return module;
}

OwningOpRef<ModuleOp> mlir::loom::buildGPTModel(MLIRContext *context,
                                                const GPTConfig &config) {
  return GPTBuilder(context, config).build();
}
