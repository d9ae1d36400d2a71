//===- SharedLibraryTest.cpp - Finding a library by soname ----------------===//
//
// runtime/core/shared_library.h on a library every machine has (the C math
// library, copied under names no loader search finds): where it is looked
// for, in what order, and what the errors say when it is absent, lacks a
// function or the override names a wrong file. cuBLASLt and NCCL go through
// the same code (CudaLibrariesTest.cpp, loom-run-backend-cuda.test).
//
//===----------------------------------------------------------------------===//
#include "runtime/core/shared_library.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

using namespace loom;
namespace fs = std::filesystem;

namespace {

constexpr const char *kOverride = "LOOM_TEST_SHARED_LIBRARY";

void expectIn(const std::string &error, const std::string &text) {
  EXPECT_NE(error.find(text), std::string::npos)
      << "expected \"" << text << "\" in:\n"
      << error;
}

/// A directory holding the math library as libloom-copy.so.1.
class SharedLibraryTest : public ::testing::Test {
protected:
  void SetUp() override {
    unsetenv(kOverride);
    dir = fs::path(::testing::TempDir()) /
          ("loom-shared-library-" + std::to_string(getpid()));
    fs::create_directories(dir);
    Dl_info info{};
    void *cosine = dlsym(RTLD_DEFAULT, "cos");
    ASSERT_NE(cosine, nullptr);
    ASSERT_NE(dladdr(cosine, &info), 0);
    copy = (dir / "libloom-copy.so.1").string();
    fs::copy_file(info.dli_fname, copy, fs::copy_options::overwrite_existing);
  }
  void TearDown() override {
    unsetenv(kOverride);
    fs::remove_all(dir);
  }

  SharedLibraryRequest request(const std::string &soname,
                               const std::string &directories) const {
    return {"Test", soname, kOverride, directories, {"cos"}, "install it"};
  }

  fs::path dir;
  std::string copy;
};

TEST_F(SharedLibraryTest, AbsentEverywhereSaysWhereItLooked) {
  const SharedLibrary lib = openSharedLibrary(request(
      "libloom-absent.so.1", ":/nonexistent-a:/nonexistent-a:" + dir.string()));
  EXPECT_EQ(lib.handle, nullptr);
  // The soname through the loader, then each directory once, empty skipped.
  const std::string inDir = (dir / "libloom-absent.so.1").string();
  EXPECT_EQ(lib.tried, (std::vector<std::string>{
                           "libloom-absent.so.1",
                           "/nonexistent-a/libloom-absent.so.1", inDir}));
  expectIn(lib.error, "Test: libloom-absent.so.1 not found (tried "
                      "libloom-absent.so.1 "
                      "/nonexistent-a/libloom-absent.so.1 " +
                          inDir + "):");
  // dlopen's reason for each place, then the fix.
  expectIn(lib.error, "/nonexistent-a/libloom-absent.so.1: cannot open "
                      "shared object file");
  expectIn(lib.error, "install it, put its directory on LD_LIBRARY_PATH, "
                      "or set LOOM_TEST_SHARED_LIBRARY to its file");
}

TEST_F(SharedLibraryTest, FoundInAFallbackDirectory) {
  const SharedLibrary lib = openSharedLibrary(
      request("libloom-copy.so.1", "/nonexistent-b:" + dir.string()));
  EXPECT_NE(lib.handle, nullptr);
  EXPECT_EQ(lib.error, "");
  EXPECT_EQ(lib.tried.back(), copy);
  EXPECT_EQ(lib.tried.size(), 3u);
}

TEST_F(SharedLibraryTest, MissingFunctionsAreNamed) {
  SharedLibraryRequest r = request("libloom-copy.so.1", dir.string());
  r.functions = {"cos", "loom_no_such_function", "sin", "loom_nor_this"};
  const SharedLibrary lib = openSharedLibrary(r);
  expectIn(lib.error, "Test: " + copy +
                          " lacks loom_no_such_function loom_nor_this; Loom "
                          "was built against libloom-copy.so.1: install it, "
                          "or set LOOM_TEST_SHARED_LIBRARY to that version's "
                          "file");
}

TEST_F(SharedLibraryTest, OverrideIsTheOnlyPlaceTried) {
  // The directory holds the library, but the override names a wrong file:
  // that is an error, not a reason to search on.
  setenv(kOverride, "/nonexistent-c/libwrong.so", 1);
  SharedLibrary lib =
      openSharedLibrary(request("libloom-copy.so.1", dir.string()));
  EXPECT_EQ(lib.handle, nullptr);
  EXPECT_EQ(lib.tried, std::vector<std::string>{"/nonexistent-c/libwrong.so"});
  expectIn(lib.error, "Test: cannot load LOOM_TEST_SHARED_LIBRARY='/"
                      "nonexistent-c/libwrong.so':");
  expectIn(lib.error, "set LOOM_TEST_SHARED_LIBRARY to the library file, "
                      "or unset it to search for libloom-copy.so.1");
  // Naming the right file loads it from there, under any name.
  setenv(kOverride, copy.c_str(), 1);
  lib = openSharedLibrary(request("libloom-absent.so.1", ""));
  EXPECT_NE(lib.handle, nullptr);
  EXPECT_EQ(lib.error, "");
  EXPECT_EQ(lib.tried, std::vector<std::string>{copy});
}

} // namespace
