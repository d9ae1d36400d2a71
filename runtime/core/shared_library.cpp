//===- shared_library.cpp - Opening a library by soname ---------*- C++ -*-===//
//
// dlopen over the request's places, in order, stopping at the first that
// opens; then dlsym for each function the caller needs.
//
//===----------------------------------------------------------------------===//
#include "runtime/core/shared_library.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

namespace loom {

SharedLibrary openSharedLibrary(const SharedLibraryRequest &request) {
  SharedLibrary lib;
  std::string reasons;
  auto attempt = [&](const std::string &path) {
    lib.tried.push_back(path);
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib.handle)
      reasons += std::string("\n  ") + dlerror();
    return lib.handle != nullptr;
  };
  const std::string &var = request.overrideVar;
  // 1. The file the user named, and nothing else: a wrong path is an error
  //    even when the library sits elsewhere.
  const char *named = var.empty() ? nullptr : std::getenv(var.c_str());
  if (named && *named) {
    if (!attempt(named)) {
      lib.error = request.what + ": cannot load " + var + "='" + named +
                  "':" + reasons + "\n  set " + var +
                  " to the library file, or unset it to search for " +
                  request.soname;
      return lib;
    }
  } else {
    // 2. The soname through the loader's search (LD_LIBRARY_PATH, the ld.so
    //    cache), then the fallback directories.
    bool found = attempt(request.soname);
    std::istringstream dirs(request.directories);
    for (std::string dir; !found && std::getline(dirs, dir, ':');) {
      const std::string path = dir + "/" + request.soname;
      if (!dir.empty() && std::find(lib.tried.begin(), lib.tried.end(), path) ==
                              lib.tried.end())
        found = attempt(path);
    }
    if (!found) {
      std::ostringstream msg;
      msg << request.what << ": " << request.soname << " not found (tried";
      for (const std::string &t : lib.tried)
        msg << " " << t;
      msg << "):" << reasons << "\n  " << request.fix
          << ", put its directory on LD_LIBRARY_PATH, or set " << var
          << " to its file";
      lib.error = msg.str();
      return lib;
    }
  }
  // 3. Every function the caller needs (an older library may lack one).
  std::string missing;
  for (const std::string &f : request.functions)
    if (!dlsym(lib.handle, f.c_str()))
      missing += " " + f;
  if (!missing.empty())
    lib.error = request.what + ": " + lib.tried.back() + " lacks" + missing +
                "; Loom was built against " + request.soname + ": " +
                request.fix + ", or set " + var + " to that version's file";
  return lib;
}

} // namespace loom
