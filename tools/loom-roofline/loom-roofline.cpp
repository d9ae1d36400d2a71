//===- loom-roofline.cpp - A step's least time, before it runs -----------===//
//
// loom-roofline PROGRAM [--stage S] [--peak-tflops F --peak-gbps G]
//
// What one step of a compiled program asks of a device, from its shapes
// alone (runtime/core/instruction_cost.h): per opcode, how many
// instructions run, their FLOPs (GEMMs and causal attention) and the bytes
// they must read and write; given a device's peak rate and memory
// bandwidth, the least time each can take (max(FLOPs / rate, bytes /
// bandwidth)) and the step's, with the tokens/s and MFU that bound allows.
// The measured side is bench/trace_breakdown.py on a loom-run --trace.
// Instructions are counted one by one: a backend's fused calls move fewer
// bytes (gelu_epilogues.h, residual_norms.h, cross_entropy_fusion.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/core/instruction_cost.h"
#include "runtime/core/json.h"
#include "runtime/core/model_flops.h"
#include "runtime/program/program.h"

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

using namespace loom;

namespace {

const char *const kUsage =
    "usage: loom-roofline PROGRAM [--stage S] [--peak-tflops F --peak-gbps "
    "G]\n"
    "  What one step of PROGRAM asks of a device, per opcode: instructions,\n"
    "  FLOPs (GEMMs, causal attention) and bytes read and written, from the\n"
    "  program's shapes; with a device's peaks, the least time each takes\n"
    "  and the step's, with the tokens/s and MFU that allows.\n"
    "  --stage S          the pipeline stage to report (default 0)\n"
    "  --peak-tflops F    the device's peak rate in TFLOP/s (989: H100 SXM,\n"
    "                     H200, dense bf16)\n"
    "  --peak-gbps G      its memory bandwidth in GB/s (3352: H100 SXM;\n"
    "                     4800: H200)\n"
    "  --json F           also write the figures to F (exact counts)\n";

int fail(const std::string &message, bool usage = false) {
  std::fprintf(stderr, "loom-roofline: error: %s\n", message.c_str());
  if (usage)
    std::fprintf(stderr, "%s", kUsage);
  return 1;
}

bool parsePositive(const char *text, double &out) {
  char *end = nullptr;
  out = std::strtod(text, &end);
  return end != text && *end == '\0' && out > 0 && out < 1e9;
}

} // namespace

int main(int argc, char **argv) {
  std::string path, jsonPath;
  double peakTflops = 0, peakGbps = 0;
  uint32_t stageIndex = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (flag == "--stage" || flag == "--peak-tflops" || flag == "--peak-gbps" ||
        flag == "--json") {
      if (i + 1 >= argc)
        return fail(flag + " needs a value", true);
      const char *value = argv[++i];
      if (flag == "--json") {
        jsonPath = value;
      } else if (flag == "--stage") {
        char *end = nullptr;
        const long s = std::strtol(value, &end, 10);
        if (end == value || *end != '\0' || s < 0 || s > 1 << 20)
          return fail("--stage expects a stage index >= 0, got '" +
                      std::string(value) + "'");
        stageIndex = static_cast<uint32_t>(s);
      } else if (!parsePositive(value, flag == "--peak-tflops" ? peakTflops
                                                               : peakGbps)) {
        return fail(flag + " expects a positive number, got '" + value + "'");
      }
      continue;
    }
    if (!flag.empty() && flag[0] == '-')
      return fail("unknown flag '" + flag + "'", true);
    if (!path.empty())
      return fail("one PROGRAM only, got '" + path + "' and '" + flag + "'",
                  true);
    path = flag;
  }
  if (path.empty())
    return fail("missing PROGRAM (a .loom file from `loom compile`)", true);
  if ((peakTflops > 0) != (peakGbps > 0))
    return fail("the roofline needs both --peak-tflops and --peak-gbps");

  program::LoadedProgram loaded;
  const Status s = program::loadProgramFile(path, loaded);
  if (!s.ok())
    return fail(s.message());
  const program::Program &prog = *loaded.root();
  const program::Stage *stage = loaded.stage(stageIndex);
  const uint32_t stages = prog.stages()->size();
  if (!stage)
    return fail("the program has no stage " + std::to_string(stageIndex) +
                " (it has " + std::to_string(stages) + "); pass --stage 0" +
                (stages > 1 ? " to " + std::to_string(stages - 1) : ""));

  int64_t devices = 1, ranksOnStage = 1;
  for (uint32_t a = 0; prog.mesh() && a < prog.mesh()->size(); ++a) {
    const program::MeshAxis *axis = prog.mesh()->Get(a);
    devices *= axis->size();
    if (!axis->name() || axis->name()->str() != "pp")
      ranksOnStage *= axis->size();
  }
  const bool training =
      stage->update_instructions() && stage->update_instructions()->size() > 0;
  std::printf("%s: stage %u of %u (each of its %" PRId64
              " rank(s)), one %s step of %u micro-batch(es); instructions "
              "one by one\n",
              path.c_str(), stageIndex, stages, ranksOnStage,
              training ? "training" : "evaluation", stage->microbatches());

  std::vector<OpcodeCost> rows = stageStepCost(*stage);
  const bool roof = peakTflops > 0;
  auto roofMs = [&](const InstructionCost &c) {
    return 1e3 * std::max(c.flops / (peakTflops * 1e12),
                          static_cast<double>(c.bytes) / (peakGbps * 1e9));
  };
  std::stable_sort(rows.begin(), rows.end(),
                   [&](const OpcodeCost &a, const OpcodeCost &b) {
                     return roof ? roofMs(a.cost) > roofMs(b.cost)
                                 : a.cost.bytes > b.cost.bytes;
                   });
  std::printf("%-22s %7s %12s %12s", "opcode", "count", "GFLOP", "MB");
  if (roof)
    std::printf(" %10s %7s %6s", "roof ms", "share", "bound");
  std::printf("\n");
  InstructionCost total;
  int64_t count = 0;
  double totalRoofMs = 0;
  for (const OpcodeCost &r : rows) {
    total.flops += r.cost.flops;
    total.bytes += r.cost.bytes;
    count += r.count;
    if (roof)
      totalRoofMs += roofMs(r.cost);
  }
  for (const OpcodeCost &r : rows) {
    std::printf("%-22s %7" PRId64 " %12.6g %12.3f",
                program::opcodeName(r.opcode).c_str(), r.count,
                r.cost.flops / 1e9, static_cast<double>(r.cost.bytes) / 1e6);
    if (roof) {
      const double ms = roofMs(r.cost);
      const bool flopBound =
          r.cost.flops / (peakTflops * 1e12) >
          static_cast<double>(r.cost.bytes) / (peakGbps * 1e9);
      std::printf(" %10.3f %6.1f%% %6s", ms,
                  totalRoofMs > 0 ? 100 * ms / totalRoofMs : 0.0,
                  flopBound ? "FLOPs" : "bytes");
    }
    std::printf("\n");
  }
  std::printf("%-22s %7" PRId64 " %12.6g %12.3f", "step", count,
              total.flops / 1e9, static_cast<double>(total.bytes) / 1e6);
  if (roof)
    std::printf(" %10.3f %6.1f%%", totalRoofMs, 100.0);
  std::printf("\n");
  double tokensPerSec = 0, mfu = 0;
  const program::ModelInfo *m = prog.model();
  if (roof && training && stages == 1 && m && totalRoofMs > 0) {
    // Every rank of a one-stage mesh runs its step at once: the global
    // batch a step.
    tokensPerSec =
        static_cast<double>(m->batch() * m->seq()) / (totalRoofMs * 1e-3);
    mfu = modelFlopsUtilization(trainingFlopsPerToken(prog), tokensPerSec,
                                peakTflops, static_cast<int>(devices));
  }
  if (!roof) {
    std::printf("pass --peak-tflops and --peak-gbps for the least time a "
                "step takes\n");
  } else {
    std::printf("at %g TFLOP/s and %g GB/s a step of this stage takes at "
                "least %.3f ms",
                peakTflops, peakGbps, totalRoofMs);
    if (tokensPerSec > 0)
      std::printf(": %.0f tokens/s, MFU %.1f%% (6N + 6LCT FLOPs a token "
                  "over %" PRId64 " device(s))",
                  tokensPerSec, 100 * mfu, devices);
    std::printf("\n");
  }
  if (jsonPath.empty())
    return 0;
  JsonValue opcodes = JsonValue::object();
  for (const OpcodeCost &r : rows) {
    JsonValue row = JsonValue::object();
    row.set("count", JsonValue::integer(r.count));
    row.set("flops", JsonValue::number(r.cost.flops));
    row.set("bytes", JsonValue::integer(r.cost.bytes));
    if (roof)
      row.set("roofline_ms", JsonValue::number(roofMs(r.cost)));
    opcodes.set(program::opcodeName(r.opcode), std::move(row));
  }
  JsonValue root = JsonValue::object();
  root.set("stage", JsonValue::integer(stageIndex));
  root.set("microbatches", JsonValue::integer(stage->microbatches()));
  root.set("opcodes", std::move(opcodes));
  root.set("flops", JsonValue::number(total.flops));
  root.set("bytes", JsonValue::integer(total.bytes));
  if (roof) {
    root.set("peak_tflops", JsonValue::number(peakTflops));
    root.set("peak_gbps", JsonValue::number(peakGbps));
    root.set("roofline_ms", JsonValue::number(totalRoofMs));
    if (tokensPerSec > 0) {
      root.set("tokens_per_s", JsonValue::number(tokensPerSec));
      root.set("mfu", JsonValue::number(mfu));
    }
  }
  std::FILE *f = std::fopen(jsonPath.c_str(), "w");
  const std::string text = writeJson(root) + "\n";
  if (!f || std::fwrite(text.data(), 1, text.size(), f) != text.size() ||
      std::fclose(f) != 0)
    return fail("cannot write --json '" + jsonPath +
                "': " + std::strerror(errno));
  return 0;
}
