//===- checkpoint.h - Parameters to and from safetensors --------*- C++ -*-===//
//
// Checkpoints hold every parameter under its HF GPT-2 name with its global
// shape, in fp32, so PyTorch / HF tools read them. A rank loads its local
// slice of each tensor (Param.sharding gives its offset). Saving is collective:
// every rank calls saveCheckpoint, sharded parameters (and their moments) are
// all-gathered over their sharding axes, and rank 0 writes the global
// tensors. Pipeline stages hold different parameters: the lead rank of each
// stage (coordinate 0 on every axis but pp) sends its stage's global tensors
// to rank 0, so the file is the same one a single-rank run writes; a
// parameter several stages hold (GPT-2's tied wte on the first and the last)
// is written once, after checking that the copies are equal. Loading needs
// nothing special: each stage reads the tensors of its own parameters.
//
// Mixed precision: a parameter with a master buffer is saved from its fp32
// master and loaded into it (its bf16 buffer gets the values rounded to
// nearest even); a BF16 buffer without master (an evaluation's) is rounded
// at load and widened at save. The file format does not change.
//
// A training program's checkpoint also holds the AdamW moments as
// `optimizer.exp_avg.<name>` and `optimizer.exp_avg_sq.<name>` (same global
// shapes; gathered / sliced by Param.moment_sharding when present, ZeRO) and
// the number of completed steps as metadata "step", so a run resumes
// exactly where it stopped.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_CHECKPOINT_H
#define LOOM_RUNTIME_CORE_CHECKPOINT_H

#include "runtime/core/executor.h"
#include "runtime/core/status.h"

#include <map>
#include <string>
#include <vector>

namespace loom {

/// Overwrites every parameter of `executor` with its slice of the tensor of
/// the same name in the safetensors file `path` (F32, BF16, F16 or F64), or
/// of "transformer.<name>" (HF's GPT2LMHeadModel.save_pretrained files;
/// their "lm_head.weight" must equal wte.weight, which the model ties to
/// it, and buffers such as "h.0.attn.bias" are ignored).
/// For a training program, also the AdamW moments when the file has them
/// (then `completedSteps` receives its "step" metadata); a weights-only file
/// zeroes the moments and gives 0 steps. Eval programs ignore optimizer
/// tensors. Errors name the file and the tensor: missing tensor, global shape
/// mismatch, unsupported dtype, optimizer state for only some parameters.
/// `metadata`, when given, receives the file's metadata (a run's notes
/// next to "step", e.g. the data order).
Status loadCheckpoint(Executor &executor, const std::string &path,
                      int64_t *completedSteps = nullptr,
                      std::map<std::string, std::string> *metadata = nullptr);

/// Writes every parameter of `executor` to `path` (fp32, global shape,
/// metadata {"format": "pt", "producer": "loom"}) atomically; for a training
/// program also the AdamW moments and metadata "step" = `completedSteps`.
/// Collective over the executor's communicator: every rank must call it; only
/// rank 0 writes (a pipeline's stages send it their tensors). Errors when a
/// parameter is sliced without Param.sharding, or when the stages' copies of
/// a shared parameter differ.
/// `runMetadata` adds the run's notes (keys other than "format",
/// "producer" and "step").
Status
saveCheckpoint(const Executor &executor, const std::string &path,
               int64_t completedSteps = 0,
               const std::map<std::string, std::string> &runMetadata = {});

/// The global tensor of parameter `p` from its buffer `buffer` (p.buffer,
/// m or v) on every rank: all-gathered over its sharding axes when sharded
/// (collective), else a copy.
Status gatherParamTensor(const Executor &executor, const ParamView &p,
                         uint32_t buffer, std::vector<float> &global);

/// `p` as its AdamW moments (and its mixed-precision master) see it: with
/// Param.moment_sharding (when present) as `sharding`, the m (or master)
/// buffer's shape as `localShape` and this rank's block offset as
/// `sliceOffset`; else `p` itself.
ParamView momentView(const Executor &executor, const ParamView &p);

/// Names of the AdamW moment tensors of parameter `name`.
std::string expAvgName(const std::string &name);
std::string expAvgSqName(const std::string &name);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_CHECKPOINT_H
