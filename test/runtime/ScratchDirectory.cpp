//===- ScratchDirectory.cpp - A test run's files, removed when it ends ----===//
//
// The tests write their files under ::testing::TempDir(), named after
// their process and test (CTest runs them in parallel), and leave them
// there: checkpoints, logs, compiled programs. Run from /tmp, every run of
// the suites left about thirty files behind (26 from the CUDA run tests
// alone). This environment gives each run of a test binary a directory of
// its own, points TempDir() at it (GoogleTest reads TEST_TMPDIR each time)
// and removes it with everything in it when the run ends.
//
// A TEST_TMPDIR set by the caller is kept, files and all: that is how to
// look at what a test wrote. Linked into each GoogleTest binary that runs
// on its own (loom-runtime-tests, loom-cuda-emulation-tests); the MPI
// suite's ranks share files by name and remove their own.
//
//===----------------------------------------------------------------------===//
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace {

class ScratchDirectory : public ::testing::Environment {
public:
  void SetUp() override {
    if (const char *given = std::getenv("TEST_TMPDIR"); given && *given)
      return;
    const char *tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp && *tmp ? tmp : "/tmp") + "/loom-tests-XXXXXX";
    std::vector<char> name(pattern.begin(), pattern.end());
    name.push_back('\0');
    if (!::mkdtemp(name.data())) {
      // The tests still run, in GoogleTest's own temporary directory.
      std::perror(("ScratchDirectory: cannot create " + pattern +
                   " (the tests write to TempDir() instead)")
                      .c_str());
      return;
    }
    dir_ = name.data();
    ::setenv("TEST_TMPDIR", dir_.c_str(), 1);
  }

  void TearDown() override {
    if (dir_.empty())
      return;
    ::unsetenv("TEST_TMPDIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    if (ec)
      std::fprintf(stderr, "ScratchDirectory: cannot remove %s: %s\n",
                   dir_.c_str(), ec.message().c_str());
    dir_.clear();
  }

private:
  std::string dir_; // empty: the caller's TEST_TMPDIR, or none made
};

// GoogleTest owns and runs registered environments around RUN_ALL_TESTS
// (gtest_main's), SetUp before the first test and TearDown after the last.
::testing::Environment *const scratchDirectory =
    ::testing::AddGlobalTestEnvironment(new ScratchDirectory);

} // namespace
