//===- StrategyFlags.cpp - Parallel strategy flags of `loom` ----*- C++ -*-===//

#include "tools/loom/StrategyFlags.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"

using namespace loom::cli;

int64_t Strategy::worldSize() const {
  int64_t n = 1;
  for (const auto &[axis, size] : mesh)
    n *= size;
  return n;
}

static bool parsePositive(llvm::StringRef text, int64_t &out) {
  return !text.getAsInteger(10, out) && out >= 1;
}

bool loom::cli::strategyFlagTakesValue(const std::string &flag) {
  static const char *const kValueFlags[] = {
      "--mesh",           "--zero",    "--microbatches", "--schedule",
      "--virtual-stages", "--backend", "--precision",    "--bucket-mb",
      "--recompute",      "--vocab-divisible-by", "--grad-precision"};
  return llvm::is_contained(kValueFlags, flag);
}

bool loom::cli::parseStrategyFlag(const std::string &flag,
                                  const std::string &value, Strategy &s,
                                  std::string &error) {
  if (flag == "--mesh") {
    // dp=2,tp=2,pp=2 ; axes not named stay 1.
    llvm::SmallVector<llvm::StringRef> parts;
    llvm::StringRef(value).split(parts, ',', -1, /*KeepEmpty=*/false);
    if (parts.empty()) {
      error = "--mesh needs axis sizes such as dp=2,tp=2,pp=2";
      return true;
    }
    for (llvm::StringRef part : parts) {
      auto [axis, size] = part.split('=');
      axis = axis.trim();
      int64_t n;
      if (!s.mesh.count(axis.str())) {
        error = "--mesh: unknown axis '" + axis.str() +
                "'; the axes are dp, tp and pp";
        return true;
      }
      if (!parsePositive(size.trim(), n)) {
        error = "--mesh: axis " + axis.str() + " needs a positive size, got '" +
                size.str() + "'";
        return true;
      }
      s.mesh[axis.str()] = n;
    }
    return true;
  }
  if (flag == "--zero") {
    if (llvm::StringRef(value).getAsInteger(10, s.zero) || s.zero < 0 ||
        s.zero > 3)
      error = "--zero takes a ZeRO stage 0, 1, 2 or 3, got '" + value + "'";
    return true;
  }
  if (flag == "--recompute") {
    s.recompute = value;
    if (value != "none" && value != "selective" && value != "full")
      error = "--recompute is none, selective or full, got '" + value + "'";
    return true;
  }
  if (flag == "--bucket-mb") {
    if (llvm::StringRef(value).getAsDouble(s.bucketMb) || s.bucketMb < 0)
      error = "--bucket-mb takes a bucket size in MiB >= 0 (0: one "
              "collective per gradient or parameter), got '" +
              value + "'";
    return true;
  }
  if (flag == "--microbatches") {
    if (!parsePositive(value, s.microbatches))
      error = "--microbatches needs a positive integer, got '" + value + "'";
    return true;
  }
  if (flag == "--vocab-divisible-by") {
    if (!parsePositive(value, s.vocabDivisibleBy))
      error = "--vocab-divisible-by needs a positive integer (128 is "
              "Megatron's default; 1 pads the vocabulary to the next "
              "multiple of tp), got '" + value + "'";
    return true;
  }
  if (flag == "--virtual-stages") {
    if (!parsePositive(value, s.virtualStages))
      error = "--virtual-stages needs a positive integer, got '" + value + "'";
    return true;
  }
  if (flag == "--schedule") {
    s.schedule = value;
    if (value != "gpipe" && value != "1f1b" && value != "interleaved")
      error = "--schedule is gpipe, 1f1b or interleaved, got '" + value + "'";
    return true;
  }
  if (flag == "--backend") {
    s.backend = value;
    if (value != "cpu" && value != "cuda")
      error = "--backend is cpu or cuda, got '" + value + "'";
    return true;
  }
  if (flag == "--precision") {
    s.precision = value;
    if (value != "fp32" && value != "bf16")
      error = "--precision is fp32 or bf16, got '" + value + "'";
    return true;
  }
  if (flag == "--grad-precision") {
    s.gradPrecision = value;
    if (value != "fp32" && value != "bf16")
      error = "--grad-precision is fp32 or bf16, got '" + value + "'";
    return true;
  }
  if (flag == "--sequence-parallel") {
    s.sequenceParallel = true;
    return true;
  }
  return false;
}

bool loom::cli::checkStrategySupported(const Strategy &s, bool train,
                                      std::string &error) {
  if (s.zero >= 1 && (!train || s.mesh.at("dp") == 1)) {
    error = "--zero " + std::to_string(s.zero) +
            " shards the model state over data-parallel ranks: it needs "
            "training (loom train, compile --train) and --mesh dp=N with "
            "N > 1";
    return false;
  }
  if (s.recompute != "none" && !train) {
    error = "--recompute " + s.recompute +
            " trades memory for recomputation in the backward pass; "
            "evaluation has none (drop the flag)";
    return false;
  }
  if (s.microbatches != 1 && !train && s.mesh.at("pp") == 1) {
    error = "--microbatches " + std::to_string(s.microbatches) +
            " splits a training step for gradient accumulation; evaluation "
            "uses the whole batch (drop the flag, or pipeline the evaluation "
            "with --mesh pp=P)";
    return false;
  }
  if (s.virtualStages != 1 && s.mesh.at("pp") == 1) {
    error = "--virtual-stages " + std::to_string(s.virtualStages) +
            " splits each pipeline stage into chunks; it needs --mesh pp=P "
            "with P > 1 and --schedule interleaved";
    return false;
  }
  if (!s.gradPrecision.empty() && !train) {
    error = "--grad-precision " + s.gradPrecision +
            " sets how a training step accumulates and reduces gradients; "
            "evaluation has none (drop the flag)";
    return false;
  }
  if (s.gradPrecision == "bf16" && s.precision != "bf16") {
    error = "--grad-precision bf16 rounds the gradients of bf16 mixed "
            "precision; it needs --precision bf16 (fp32 training keeps fp32 "
            "gradients)";
    return false;
  }
  if (s.sequenceParallel && s.mesh.at("tp") == 1) {
    error = "--sequence-parallel splits the sequence over the "
            "tensor-parallel ranks: it needs --mesh tp=T with T > 1";
    return false;
  }
  return true;
}
