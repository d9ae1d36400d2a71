//===- sampler.cpp - Text sampling from an evaluation program ---*- C++ -*-===//
//
// One forward per generated token over the whole batch (row 0 carries the
// context, the other rows are zero); no KV cache, which the program format
// does not have. Costs steps x forward, fine for short demonstrations.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/sampler.h"

#include "runtime/core/bfloat16.h"
#include "runtime/core/param_init.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>

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

namespace {

/// A uniform number in [0, 1) of (seed, n) alone: 53 random bits.
double uniformOf(uint64_t seed, uint64_t n) {
  return static_cast<double>(splitMix64(splitMix64(seed) ^ n) >> 11) *
         0x1.0p-53;
}

} // namespace

Status checkSamplingConfig(const SamplingConfig &c) {
  LOOM_CHECK(std::isfinite(c.temperature) && c.temperature >= 0,
             "--temperature must be a finite number >= 0 (0: greedy), got "
                 << c.temperature);
  LOOM_CHECK(c.topK >= 0,
             "--top-k must be >= 0 (0: every token), got " << c.topK);
  LOOM_CHECK(c.topK == 0 || c.temperature > 0,
             "--top-k " << c.topK
                        << " restricts a random draw, but sampling is greedy "
                           "without a temperature; add --temperature T "
                           "(e.g. 0.8) or drop --top-k");
  return Status::success();
}

int32_t chooseToken(const float *logits, int64_t vocab, const SamplingConfig &c,
                    uint64_t n) {
  int64_t best = 0;
  for (int64_t v = 1; v < vocab; ++v)
    // Strict: ties keep the lowest id; a number replaces a NaN, never the
    // other way round.
    if (!std::isnan(logits[v]) &&
        (std::isnan(logits[best]) || logits[v] > logits[best]))
      best = v;
  if (c.temperature <= 0 || std::isnan(logits[best]) ||
      std::isinf(logits[best]))
    return static_cast<int32_t>(best);
  // The k-th largest logit: those below it are out (nanoGPT's top_k keeps
  // the ones equal to it too).
  float threshold = -std::numeric_limits<float>::infinity();
  if (c.topK > 0 && c.topK < vocab) {
    std::vector<float> sorted;
    sorted.reserve(static_cast<size_t>(vocab));
    for (int64_t v = 0; v < vocab; ++v)
      if (!std::isnan(logits[v]))
        sorted.push_back(logits[v]);
    if (static_cast<int64_t>(sorted.size()) > c.topK) {
      std::nth_element(sorted.begin(), sorted.begin() + (c.topK - 1),
                       sorted.end(), std::greater<float>());
      threshold = sorted[static_cast<size_t>(c.topK - 1)];
    }
  }
  // softmax((logit - max) / T) in double; the draw walks the cumulative
  // weights in id order.
  std::vector<double> weight(static_cast<size_t>(vocab), 0.0);
  double total = 0;
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(logits[v]) && logits[v] >= threshold) {
      weight[v] = std::exp((static_cast<double>(logits[v]) - logits[best]) /
                           c.temperature);
      total += weight[v];
    }
  const double target = uniformOf(c.seed, n) * total;
  double sum = 0;
  int64_t last = best;
  for (int64_t v = 0; v < vocab; ++v) {
    if (weight[v] <= 0)
      continue;
    sum += weight[v];
    last = v;
    if (target < sum)
      return static_cast<int32_t>(v);
  }
  return static_cast<int32_t>(last); // rounding left the target at the end
}

namespace {

/// One executor's sampling state: its layout and the host rows that fill
/// and read its buffers.
struct SamplingBuffers {
  Executor *ex = nullptr;
  SamplerLayout layout;
  std::vector<int32_t> ids, zeros;
  std::vector<uint16_t> narrow; // bf16 logits (mixed precision)

  Status bind(Executor &executor) {
    const int64_t width = ex ? layout.paddedVocab : -1;
    ex = &executor;
    LOOM_RETURN_IF_ERROR(findSamplerLayout(executor, layout));
    // The logits row is read into one host row for all of them.
    LOOM_CHECK(width < 0 || layout.paddedVocab == width,
               "the programs sampling switches between have logits of "
                   << width << " and " << layout.paddedVocab
                   << " columns; compile them from one model");
    const size_t rowTokens = static_cast<size_t>(layout.batch * layout.seq);
    ids.assign(rowTokens, 0);
    zeros.assign(rowTokens, 0);
    narrow.assign(executor.bufferDType(layout.logits) == DType::BF16
                      ? static_cast<size_t>(layout.paddedVocab)
                      : 0,
                  0);
    return Status::success();
  }
};

} // namespace

double tokenLogProb(const float *logits, int64_t vocab, int32_t token) {
  if (std::isnan(logits[token]) || std::isinf(logits[token]))
    return logits[token] > 0 ? 0.0 : -std::numeric_limits<double>::infinity();
  double max = logits[token];
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(logits[v]))
      max = std::max(max, static_cast<double>(logits[v]));
  double sum = 0;
  for (int64_t v = 0; v < vocab; ++v)
    if (!std::isnan(logits[v]))
      sum += std::exp(static_cast<double>(logits[v]) - max);
  return static_cast<double>(logits[token]) - max - std::log(sum);
}

Status sampleTokens(Executor &ex, std::vector<int32_t> &tokens, int64_t count,
                    const SamplingConfig &config,
                    std::vector<double> *logProbs) {
  return sampleTokens(
      [&](int64_t, Executor *&chosen) {
        chosen = &ex;
        return Status::success();
      },
      tokens, count, config, logProbs);
}

Status sampleTokens(const ExecutorForContext &executorFor,
                    std::vector<int32_t> &tokens, int64_t count,
                    const SamplingConfig &config,
                    std::vector<double> *logProbs) {
  LOOM_RETURN_IF_ERROR(checkSamplingConfig(config));
  LOOM_CHECK(count >= 0, "cannot sample " << count << " tokens");
  LOOM_CHECK(!tokens.empty(), "the prompt is empty; pass --prompt TEXT with "
                              "at least one character");
  SamplingBuffers in;
  {
    Executor *first = nullptr;
    LOOM_RETURN_IF_ERROR(
        executorFor(static_cast<int64_t>(tokens.size()), first));
    LOOM_RETURN_IF_ERROR(in.bind(*first));
  }
  const int64_t V = in.ex->model().vocab_size();
  // Set by the caller from a tokenizer's size, never by a flag.
  assert(config.vocabLimit >= 0 && "SamplingConfig::vocabLimit is >= 0");
  const int64_t columns = config.vocabLimit > 0
                              ? std::min(in.layout.vocab, config.vocabLimit)
                              : in.layout.vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    LOOM_CHECK(tokens[i] >= 0 && tokens[i] < V,
               "token " << i << " is " << tokens[i]
                        << ", outside the vocabulary of " << V << " tokens");
  std::vector<float> row(static_cast<size_t>(in.layout.paddedVocab));
  for (int64_t n = 0; n < count; ++n) {
    // The executor for this context (a shorter program while it fits one);
    // past the longest program's seq, the last seq tokens.
    Executor *ex = nullptr;
    LOOM_RETURN_IF_ERROR(executorFor(static_cast<int64_t>(tokens.size()), ex));
    // Bound anew each token (it is cheap next to the forward): a replaced
    // executor may sit at its predecessor's address, so the pointer cannot
    // tell that the layout changed.
    LOOM_RETURN_IF_ERROR(in.bind(*ex));
    const SamplerLayout &l = in.layout;
    const int64_t L =
        std::min<int64_t>(static_cast<int64_t>(tokens.size()), l.seq);
    // The forward may overwrite nothing but its outputs; refill anyway so
    // every step sees exactly this context.
    std::fill(in.ids.begin(), in.ids.end(), 0);
    std::copy(tokens.end() - L, tokens.end(), in.ids.begin());
    LOOM_RETURN_IF_ERROR(ex->copyToBuffer(l.tokens, in.ids.data(),
                                          in.ids.size() * sizeof(int32_t)));
    if (l.targets >= 0)
      LOOM_RETURN_IF_ERROR(ex->copyToBuffer(static_cast<uint32_t>(l.targets),
                                            in.zeros.data(),
                                            in.zeros.size() * sizeof(int32_t)));
    LOOM_RETURN_IF_ERROR(ex->run().withContext("sampling token " +
                                               std::to_string(n + 1) + " of " +
                                               std::to_string(count)));
    // Row L - 1 of the logits (the first row of the batch); bf16 logits
    // (mixed precision) are widened, exactly, before the same choice.
    if (!in.narrow.empty()) {
      LOOM_RETURN_IF_ERROR(ex->bufferMemory().copyOut(
          in.narrow.data(),
          static_cast<const uint16_t *>(ex->bufferData(l.logits)) +
              (L - 1) * l.paddedVocab,
          in.narrow.size() * sizeof(uint16_t)));
      bf16ToFloats(row.data(), in.narrow.data(), l.paddedVocab);
    } else {
      LOOM_RETURN_IF_ERROR(ex->bufferMemory().copyOut(
          row.data(),
          static_cast<const float *>(ex->bufferData(l.logits)) +
              (L - 1) * l.paddedVocab,
          row.size() * sizeof(float)));
    }
    tokens.push_back(
        chooseToken(row.data(), columns, config, static_cast<uint64_t>(n)));
    if (logProbs)
      logProbs->push_back(tokenLogProb(row.data(), columns, tokens.back()));
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
