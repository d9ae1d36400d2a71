//===- shared_library.h - Opening a shared library by soname ----*- C++ -*-===//
//
// How the CUDA backend finds cuBLASLt and NCCL at run time
// (runtime/cuda/cuda_libraries.cpp), kept apart from the forwarders so the
// search and its messages can be tested on any library: a user-named file
// alone, or the soname through the dynamic loader's search and then a list
// of fallback directories; then every function the caller needs must
// resolve. A failure says what was tried, dlopen's reasons and the fix.
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_RUNTIME_CORE_SHARED_LIBRARY_H
#define LOOM_RUNTIME_CORE_SHARED_LIBRARY_H

#include <string>
#include <vector>

namespace loom {

/// What to open and how to phrase a failure.
struct SharedLibraryRequest {
  /// The library's name in messages ("cuBLASLt").
  std::string what;
  /// The file name the loader searches for ("libcublasLt.so.13").
  std::string soname;
  /// The environment variable that names the file to use instead of any
  /// search ("LOOM_CUBLASLT_LIBRARY"); when set, only that file is tried.
  std::string overrideVar;
  /// Where to look after the loader's own search, ':'-separated; empty
  /// entries and repeats are skipped.
  std::string directories;
  /// Functions that must resolve in the library.
  std::vector<std::string> functions;
  /// How to install it, the start of every fix ("install NCCL").
  std::string fix;
};

/// A library opened for the process (never closed), or why not.
struct SharedLibrary {
  /// dlopen's handle; null on failure.
  void *handle = nullptr;
  /// Empty when the library opened and every function resolved.
  std::string error;
  /// The files tried, in order (the last one opened when handle is set).
  std::vector<std::string> tried;
};

/// Opens the library `request` describes (dlopen RTLD_NOW | RTLD_LOCAL).
SharedLibrary openSharedLibrary(const SharedLibraryRequest &request);

} // namespace loom

#endif // LOOM_RUNTIME_CORE_SHARED_LIBRARY_H
