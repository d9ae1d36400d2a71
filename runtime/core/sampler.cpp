//===- sampler.cpp - Greedy byte-level text sampling ------------*- C++ -*-===//
//
// One forward per generated token over the whole batch (row 0 carries the
// context, the other rows are zero); no KV cache, which the program format
// does not have. Costs steps x forward, fine for short demonstrations.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/sampler.h"

#include "runtime/core/bfloat16.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace loom {

using program::DType;
using program::Opcode;

Status findSamplerLayout(const Executor &ex, SamplerLayout &layout) {
  layout = SamplerLayout();
  const program::Stage &stage = ex.stage();
  const program::ModelInfo &model = ex.model();
  LOOM_CHECK(!ex.isTraining(),
             "sampling needs an eval program: compile without --train");
  const int64_t B = model.batch(), T = model.seq(), V = model.vocab_size();
  LOOM_CHECK(B >= 1 && T >= 1 && V >= 1,
             "the program's model info has batch " << B << ", seq " << T
                                                   << ", vocab_size " << V
                                                   << "; sampling needs >= 1");
  LOOM_CHECK(stage.tokens() >= 0,
             "stage " << stage.index()
                      << " has no tokens buffer; sampling runs the whole "
                         "model on one stage (compile without a pipeline)");
  const uint32_t tokens = static_cast<uint32_t>(stage.tokens());
  LOOM_CHECK(ex.bufferDType(tokens) == DType::I32 &&
                 ex.bufferNumel(tokens) == B * T,
             "the tokens buffer " << program::shapeString(ex.bufferShape(tokens))
                                  << " does not hold batch x seq = " << B
                                  << " x " << T << " i32 ids");
  if (stage.targets() >= 0) {
    const uint32_t targets = static_cast<uint32_t>(stage.targets());
    LOOM_CHECK(ex.bufferDType(targets) == DType::I32 &&
                   ex.bufferNumel(targets) == B * T,
               "the targets buffer "
                   << program::shapeString(ex.bufferShape(targets))
                   << " does not hold batch x seq = " << B << " x " << T
                   << " i32 ids");
  }
  const program::Instruction *ce = nullptr;
  if (const auto *list = stage.instructions())
    for (const program::Instruction *ins : *list)
      if (ins->opcode() == Opcode::CrossEntropy && ins->inputs() &&
          ins->inputs()->size() >= 1) {
        ce = ins;
        break;
      }
  LOOM_CHECK(ce, "stage " << stage.index()
                          << " has no CrossEntropy instruction, so there are "
                             "no logits to sample from (sample on the stage "
                             "that computes the loss)");
  const uint32_t logits = ce->inputs()->Get(0);
  const std::vector<int64_t> &shape = ex.bufferShape(logits);
  const int64_t Vp = shape.empty() ? 0 : shape.back();
  const DType logitsType = ex.bufferDType(logits);
  LOOM_CHECK((logitsType == DType::F32 || logitsType == DType::BF16) &&
                 Vp >= 1 && ex.bufferNumel(logits) == B * T * Vp,
             "the logits buffer " << program::shapeString(shape)
                                  << " (the first input of the CrossEntropy) "
                                     "is not f32 / bf16 [batch, seq, vocab] "
                                     "with "
                                     "batch x seq = "
                                  << B << " x " << T);
  layout.tokens = tokens;
  layout.targets = stage.targets();
  layout.logits = logits;
  layout.batch = B;
  layout.seq = T;
  layout.paddedVocab = Vp;
  layout.vocab = std::min(Vp, V);
  return Status::success();
}

Status promptTokens(const std::string &prompt, int64_t vocabSize,
                    std::vector<int32_t> &tokens) {
  tokens.clear();
  LOOM_CHECK(!prompt.empty(), "the prompt is empty; pass --prompt TEXT with "
                              "at least one character");
  for (size_t i = 0; i < prompt.size(); ++i) {
    const int32_t byte = static_cast<unsigned char>(prompt[i]);
    if (byte >= vocabSize) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned>(byte));
      LOOM_ERROR("prompt byte " << i << " is " << hex << " (token " << byte
                                << "), outside the model's vocabulary of "
                                << vocabSize
                                << " tokens; tokens are bytes, so use only "
                                   "characters whose bytes are below "
                                << vocabSize
                                << (vocabSize <= 128 ? " (e.g. plain ASCII "
                                                       "letters if they fit)"
                                                     : " (e.g. plain ASCII)"));
    }
    tokens.push_back(byte);
  }
  return Status::success();
}

Status sampleGreedy(Executor &ex, std::vector<int32_t> &tokens,
                    int64_t count) {
  SamplerLayout l;
  LOOM_RETURN_IF_ERROR(findSamplerLayout(ex, l));
  LOOM_CHECK(count >= 0, "cannot sample " << count << " tokens");
  LOOM_CHECK(!tokens.empty(), "the prompt is empty; pass --prompt TEXT with "
                              "at least one character");
  const int64_t V = ex.model().vocab_size();
  for (size_t i = 0; i < tokens.size(); ++i)
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] < V,
               "token " << i << " is " << tokens[i]
                        << ", outside the vocabulary of " << V << " tokens");
  const int64_t rowTokens = l.batch * l.seq;
  int32_t *ids = static_cast<int32_t *>(ex.bufferData(l.tokens));
  int32_t *targets =
      l.targets >= 0
          ? static_cast<int32_t *>(ex.bufferData(static_cast<uint32_t>(l.targets)))
          : nullptr;
  const bool bf16 = ex.bufferDType(l.logits) == DType::BF16;
  std::vector<float> widened(bf16 ? static_cast<size_t>(l.paddedVocab) : 0);
  for (int64_t n = 0; n < count; ++n) {
    const int64_t L = std::min<int64_t>(static_cast<int64_t>(tokens.size()),
                                        l.seq);
    // The forward may overwrite nothing but its outputs; refill anyway so
    // every step sees exactly this context.
    std::fill(ids, ids + rowTokens, 0);
    std::copy(tokens.end() - L, tokens.end(), ids);
    if (targets)
      std::fill(targets, targets + rowTokens, 0);
    LOOM_RETURN_IF_ERROR(ex.run().withContext(
        "sampling token " + std::to_string(n + 1) + " of " +
        std::to_string(count)));
    const float *row = static_cast<const float *>(ex.bufferData(l.logits)) +
                       (L - 1) * l.paddedVocab;
    if (bf16) {
      // Mixed precision: the row widened (exact), then the same argmax.
      bf16ToFloats(widened.data(),
                   static_cast<const uint16_t *>(ex.bufferData(l.logits)) +
                       (L - 1) * l.paddedVocab,
                   l.paddedVocab);
      row = widened.data();
    }
    int64_t best = 0;
    for (int64_t v = 1; v < l.vocab; ++v)
      if (row[v] > row[best]) // strict: ties keep the lowest id; NaN never wins
        best = v;
    tokens.push_back(static_cast<int32_t>(best));
  }
  return Status::success();
}

std::string renderTokens(const std::vector<int32_t> &tokens) {
  std::string text;
  text.reserve(tokens.size());
  for (int32_t t : tokens) {
    const bool printable = (t >= 0x20 && t < 0x7F) || t == '\n' || t == '\t';
    text.push_back(printable ? static_cast<char>(t) : '?');
  }
  return text;
}

} // namespace loom
