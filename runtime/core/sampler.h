//===- sampler.h - Text sampling from an evaluation program -----*- C++ -*-===//
//
// Shows what a model learned: starting from a prompt (its bytes are the token
// ids, or a tokenizer's ids: bpe_tokenizer.h), repeatedly run an evaluation
// program's forward on the last <= T tokens (row 0 of the batch, padded with 0;
// causal attention keeps the padding from affecting the last real position),
// take the logits at that position (the first input of the stage's CrossEntropy
// instruction, [B, T, Vp]), and append a token chosen among the first min(Vp,
// vocab_size) columns: the argmax (greedy; ties: lowest id), or, with a
// temperature, a draw from softmax(logits / temperature) over the top-k logits,
// as nanoGPT's sample.py (--temperature, --top_k) does. The targets only feed
// the loss and are filled with 0.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_SAMPLER_H
#define LOOM_RUNTIME_CORE_SAMPLER_H

#include "runtime/core/executor.h"
#include "runtime/core/status.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loom {

/// Where sampling reads and writes in a stage.
struct SamplerLayout {
  uint32_t tokens = 0;  // I32 buffer of batch x seq ids
  int32_t targets = -1; // I32 buffer of batch x seq ids, -1 if none
  uint32_t logits = 0;  // F32 [..., Vp] buffer: the CrossEntropy's logits
  int64_t batch = 0, seq = 0;
  int64_t paddedVocab = 0; // Vp: the logits' last dimension
  int64_t vocab = 0;       // columns the argmax considers: min(Vp, vocab_size)
};

/// Checks that the executor's stage can be sampled from (an evaluation
/// program whose stage has a tokens buffer of batch x seq I32 ids and a
/// CrossEntropy instruction whose F32 logits hold batch x seq rows) and
/// finds its buffers. Errors say what is missing.
Status findSamplerLayout(const Executor &executor, SamplerLayout &layout);

/// The token ids of `prompt`: one per byte. Errors when the prompt is empty
/// or a byte is not below `vocabSize`.
Status promptTokens(const std::string &prompt, int64_t vocabSize,
                    std::vector<int32_t> &tokens);

/// How the next token is chosen from a logits row.
struct SamplingConfig {
  /// 0: greedy (the argmax). > 0: a draw from softmax(logits / temperature).
  double temperature = 0.0;
  /// With a temperature: only the k largest logits (and those equal to the
  /// k-th) can be drawn; 0 keeps them all.
  int64_t topK = 0;
  /// The draws' seed: draw n uses a uniform number of (seed, n) alone, so a
  /// run is reproducible.
  uint64_t seed = 1337;
  /// > 0: only ids below this are chosen, e.g. a tokenizer's size when the
  /// model's vocabulary is larger (nanoGPT pads GPT-2's 50257 to 50304);
  /// 0: the model's vocab_size.
  int64_t vocabLimit = 0;
};

/// Checks a SamplingConfig (temperature finite and >= 0, top-k >= 0 and
/// only with a temperature), naming the flag to fix.
Status checkSamplingConfig(const SamplingConfig &config);

/// The token chosen from `logits[0, vocab)` for draw `n` (0-based) under
/// `config`. NaN logits are never chosen (when every logit is NaN: 0).
int32_t chooseToken(const float *logits, int64_t vocab,
                    const SamplingConfig &config, uint64_t n);

/// log p(token) under softmax(logits[0, vocab)): the model's own
/// distribution (no temperature, every column; NaN logits left out), as
/// OpenAI's `logprobs`. In double; -inf for a NaN or -inf logit.
double tokenLogProb(const float *logits, int64_t vocab, int32_t token);

/// Appends `count` tokens chosen under `config` to `tokens` (which must be
/// non-empty and hold ids below the model's vocab_size), running the forward
/// once per token. Overwrites the tokens / targets buffers. `logProbs`, when
/// given, gets each sampled token's tokenLogProb.
Status sampleTokens(Executor &executor, std::vector<int32_t> &tokens,
                    int64_t count, const SamplingConfig &config = {},
                    std::vector<double> *logProbs = nullptr);

/// The executor sampling runs for a context of `length` tokens: one whose
/// program's seq holds it, or the longest one there is (then the context is
/// its last seq tokens). See SamplingContexts (sampling_contexts.h).
using ExecutorForContext =
    std::function<Status(int64_t length, Executor *&executor)>;

/// sampleTokens over executors of several sequence lengths: each token runs
/// the one `executorFor` gives for the context so far.
Status sampleTokens(const ExecutorForContext &executorFor,
                    std::vector<int32_t> &tokens, int64_t count,
                    const SamplingConfig &config = {},
                    std::vector<double> *logProbs = nullptr);

/// The text of `tokens` for a terminal: each id is a byte; printable ASCII,
/// '\n' and '\t' as-is, anything else (other bytes, ids >= 256) as '?'.
std::string renderTokens(const std::vector<int32_t> &tokens);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_SAMPLER_H
