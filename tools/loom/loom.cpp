//===- loom.cpp - The umbrella CLI: compile, eval ---------------*- C++ -*-===//
//
//   loom compile --config C.json [--batch B] [--seq T] [strategy] -o OUT.loom
//   loom eval    --config C.json --data TOK.bin --steps N [--batch B]
//                [--seq T] [--seed S] [--load-checkpoint F]
//                [--save-checkpoint F] [--log-json F] [--trace F] [strategy]
//
// `compile` runs the whole compiler in process (import, passes, program
// emission); `eval` compiles to a temporary program and launches loom-run,
// which lives next to this binary.
//
//===----------------------------------------------------------------------===//

#include "dialects/Loom/IR/LoomOps.h"
#include "dialects/Loom/Models/GPTModel.h"
#include "passes/Lowering/ProgramEmitter.h"
#include "passes/Pipelines.h"
#include "tools/loom/StrategyFlags.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <set>
#include <vector>

using namespace mlir;
using namespace ::loom::cli;

namespace {

const char *kUsage = R"(usage:
  loom compile --config CFG.json [--batch B] [--seq T] [strategy flags] -o OUT.loom
               [--emit-ir OUT.mlir]
  loom eval    --config CFG.json --data TOKENS.bin --steps N [--batch B] [--seq T]
               [--seed S] [--load-checkpoint F] [--save-checkpoint F]
               [--log-json F] [--trace F.json] [--quiet] [strategy flags]

  --batch defaults to 8, --seq to the config's n_positions.
strategy flags:
  --mesh dp=D,tp=T,pp=P  --zero 0..3  --microbatches M
  --schedule gpipe|1f1b|interleaved  --virtual-stages V  --sequence-parallel
  --backend cpu|cuda  --precision fp32|bf16
)";

int fail(const std::string &command, const std::string &message) {
  llvm::errs() << "loom " << command << ": error: " << message << "\n";
  return 1;
}

/// Flags of one subcommand: value flags by name, plus the strategy.
struct Invocation {
  std::string command;
  std::map<std::string, std::string> values;
  std::set<std::string> switches;
  Strategy strategy;
};

/// Parses `--flag value` / `--flag=value` against the allowed flags.
std::optional<Invocation> parse(const std::string &command,
                                std::vector<std::string> args,
                                const std::set<std::string> &valueFlags,
                                const std::set<std::string> &switchFlags) {
  Invocation inv;
  inv.command = command;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string flag = args[i], value;
    bool inlineValue = false;
    if (size_t eq = flag.find('='); eq != std::string::npos &&
                                    flag.rfind("--", 0) == 0) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
      inlineValue = true;
    }
    if (flag == "-o")
      flag = "--output";
    bool needsValue = valueFlags.count(flag) ||
                      (flag != "--sequence-parallel" &&
                       (flag == "--mesh" || flag == "--zero" ||
                        flag == "--microbatches" || flag == "--schedule" ||
                        flag == "--virtual-stages" || flag == "--backend" ||
                        flag == "--precision"));
    if (needsValue && !inlineValue) {
      if (i + 1 >= args.size()) {
        fail(command, flag + " needs a value");
        return std::nullopt;
      }
      value = args[++i];
    }
    std::string error;
    bool usedValue = false;
    if (parseStrategyFlag(flag, value, inv.strategy, error, usedValue)) {
      if (!error.empty()) {
        fail(command, error);
        return std::nullopt;
      }
      continue;
    }
    if (valueFlags.count(flag)) {
      inv.values[flag] = value;
    } else if (switchFlags.count(flag) && !inlineValue) {
      inv.switches.insert(flag);
    } else {
      fail(command, "unknown argument '" + args[i] + "'\n" + kUsage);
      return std::nullopt;
    }
  }
  return inv;
}

std::optional<int64_t> intFlag(const Invocation &inv, const std::string &flag,
                               int64_t fallback, int64_t minimum) {
  auto it = inv.values.find(flag);
  if (it == inv.values.end())
    return fallback;
  int64_t value;
  if (llvm::StringRef(it->second).getAsInteger(10, value) || value < minimum) {
    fail(inv.command, flag + " needs an integer >= " +
                          std::to_string(minimum) + ", got '" + it->second +
                          "'");
    return std::nullopt;
  }
  return value;
}

/// Compiles the model of `--config` into a program file at `output`.
int compileProgram(const Invocation &inv, const std::string &output) {
  auto configIt = inv.values.find("--config");
  if (configIt == inv.values.end())
    return fail(inv.command, std::string("--config CFG.json is required\n") +
                                 kUsage);
  std::string error;
  if (!checkStrategySupported(inv.strategy, error))
    return fail(inv.command, error);
  std::optional<int64_t> batch = intFlag(inv, "--batch", 8, 1);
  std::optional<int64_t> seq = intFlag(inv, "--seq", 0, 1);
  if (!batch || !seq)
    return 1;

  const std::string &configPath = configIt->second;
  auto text = llvm::MemoryBuffer::getFile(configPath);
  if (!text)
    return fail(inv.command, "cannot read config '" + configPath +
                                 "': " + text.getError().message());
  llvm::Expected<mlir::loom::GPTConfig> config =
      mlir::loom::parseGPTConfig((*text)->getBuffer(), *batch, *seq);
  if (!config)
    return fail(inv.command,
                configPath + ": " + llvm::toString(config.takeError()));

  MLIRContext context;
  context.loadDialect<mlir::loom::LoomDialect, func::FuncDialect>();
  OwningOpRef<ModuleOp> module = mlir::loom::buildGPTModel(&context, *config);
  PassManager pm(&context);
  mlir::loom::buildCompilePipeline(pm, mlir::loom::CompilePipelineOptions());
  if (failed(pm.run(*module)))
    return fail(inv.command, "compilation failed (diagnostics above)");

  if (auto ir = inv.values.find("--emit-ir"); ir != inv.values.end()) {
    std::error_code ec;
    llvm::raw_fd_ostream os(ir->second, ec);
    if (ec)
      return fail(inv.command, "cannot write '" + ir->second +
                                   "': " + ec.message());
    module->print(os);
  }

  // Write next to the target and rename, so a reader never sees half a file.
  std::string temp = output + ".tmp";
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(temp, ec, llvm::sys::fs::OF_None);
    if (ec)
      return fail(inv.command, "cannot write '" + output +
                                   "': " + ec.message());
    if (failed(mlir::loom::emitProgram(*module, os)))
      return fail(inv.command, "program emission failed (diagnostics above)");
  }
  if (std::error_code ec = llvm::sys::fs::rename(temp, output))
    return fail(inv.command, "cannot write '" + output + "': " + ec.message());
  return 0;
}

int runCompile(std::vector<std::string> args) {
  auto inv = parse("compile", std::move(args),
                   {"--config", "--batch", "--seq", "--output", "--emit-ir"},
                   {});
  if (!inv)
    return 1;
  auto out = inv->values.find("--output");
  if (out == inv->values.end())
    return fail("compile", std::string("-o OUT.loom is required\n") + kUsage);
  if (int rc = compileProgram(*inv, out->second))
    return rc;
  llvm::outs() << "loom compile: wrote " << out->second << "\n";
  return 0;
}

int runEval(const char *argv0, std::vector<std::string> args) {
  auto inv = parse("eval", std::move(args),
                   {"--config", "--batch", "--seq", "--data", "--steps",
                    "--seed", "--load-checkpoint", "--save-checkpoint",
                    "--log-json", "--trace", "--emit-ir"},
                   {"--quiet"});
  if (!inv)
    return 1;
  for (const char *required : {"--data", "--steps"})
    if (!inv->values.count(required))
      return fail("eval", std::string(required) + " is required\n" + kUsage);

  // 1. Compile into a private temporary directory.
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("loom-eval", dir))
    return fail("eval", "cannot create a temporary directory: " + ec.message());
  std::string program = (dir + "/program.loom").str();
  int rc = compileProgram(*inv, program);

  // 2. Launch loom-run from this binary's directory.
  if (rc == 0) {
    std::string self = llvm::sys::fs::getMainExecutable(
        argv0, reinterpret_cast<void *>(&runEval));
    llvm::SmallString<256> runner(llvm::sys::path::parent_path(self));
    llvm::sys::path::append(runner, "loom-run");
    if (!llvm::sys::fs::can_execute(runner)) {
      rc = fail("eval", "cannot find loom-run next to loom (" +
                            runner.str().str() + "); build it with ninja");
    } else {
      std::vector<std::string> runArgs{runner.str().str(), program};
      for (const char *flag :
           {"--data", "--steps", "--seed", "--load-checkpoint",
            "--save-checkpoint", "--log-json", "--trace"})
        if (auto it = inv->values.find(flag); it != inv->values.end()) {
          runArgs.push_back(flag);
          runArgs.push_back(it->second);
        }
      if (inv->switches.count("--quiet"))
        runArgs.push_back("--quiet");
      std::vector<llvm::StringRef> refs(runArgs.begin(), runArgs.end());
      std::string error;
      rc = llvm::sys::ExecuteAndWait(runner, refs, std::nullopt, {}, 0, 0,
                                     &error);
      if (rc < 0)
        rc = fail("eval", "loom-run did not finish: " + error);
    }
  }
  llvm::sys::fs::remove_directories(dir);
  return rc;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" ||
      std::string(argv[1]) == "-h") {
    llvm::outs() << kUsage;
    return argc < 2 ? 1 : 0;
  }
  std::string command = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "compile")
    return runCompile(std::move(args));
  if (command == "eval")
    return runEval(argv[0], std::move(args));
  llvm::errs() << "loom: error: unknown command '" << command << "'\n"
               << kUsage;
  return 1;
}
