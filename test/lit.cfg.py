# -*- Python -*-
# lit configuration for Loom's FileCheck suite.
import os
import sys

import lit.formats
from lit.llvm import llvm_config

config.name = "Loom"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".json", ".test"]
config.excludes = ["Inputs", "CMakeLists.txt", "runtime", "lit.cfg.py",
                   "lit.site.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.loom_obj_root, "test")

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%loom_src", config.loom_src_root))
config.substitutions.append(("%loom_obj", config.loom_obj_root))
config.substitutions.append(("%python", sys.executable))

llvm_config.with_system_environment(["HOME", "TMP", "TEMP"])
llvm_config.use_default_substitutions()

tool_dirs = [config.loom_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["loom-opt", "loom-translate", "loom", "loom-run", "loom-run-guarded", "loom-roofline"], tool_dirs)
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.with_environment("PATH", config.loom_tools_dir, append_path=True)

# Builds with the CUDA backend (runtime/cuda/); GPU runs are scripts/gpu-check's.
if getattr(config, "loom_enable_cuda", "OFF").upper() in ("ON", "1", "TRUE", "YES"):
    config.available_features.add("loom-cuda")
    # loom-run and gpu-check step d's benchmarks on the emulated CUDA
    # runtime (test/runtime/CMakeLists.txt).
    llvm_config.add_tool_substitutions(
        ["loom-run-emulated", "loom-bench-gemm-cublaslt-emulated",
         "loom-bench-attention-cuda-emulated"], tool_dirs)

# End-to-end tests compare with PyTorch, which Debian's python3-torch provides
# only for /usr/bin/python3 (the python3 on PATH may be another interpreter).
import subprocess
torch_python = "/usr/bin/python3"
try:
    subprocess.run([torch_python, "-c", "import torch, numpy"], check=True,
                   capture_output=True, timeout=120)
    config.available_features.add("torch")
except (OSError, subprocess.SubprocessError):
    lit_config.note("PyTorch not importable by /usr/bin/python3: "
                    "end-to-end reference tests are unsupported")
config.substitutions.append(("%torch_python", torch_python))
# References that need Debian's python3 packages but not PyTorch (the BPE
# reference's `regex` module): the same interpreter, for tests without
# REQUIRES: torch.
config.substitutions.append(("%debian_python", torch_python))
config.substitutions.append(("%loom_bin", config.loom_tools_dir))

# Idle OpenMP threads sleep (loom-run --help, OMP_WAIT_POLICY): with lit's
# two workers on two cores, libgomp's default spinning took the cores from
# the other test's working threads (test/e2e: 356 s spinning, 318-323 s
# sleeping). `loom train` sets the same for its runs; tests that call
# loom-run or the GoogleTest binaries directly get it here.
config.environment["OMP_WAIT_POLICY"] = "PASSIVE"
