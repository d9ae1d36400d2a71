//===- MpiTestUtil.h - The fixture of the mpirun -np 4 tests ----*- C++ -*-===//
//
// Shared by the files of loom-mpi-tests (MpiTest.cpp, MpiBF16Test.cpp): the
// world must have 4 ranks, each test gets a fresh MpiCommunicator over it,
// and a failure on any rank fails the test on every rank (only rank 0
// prints).
//
//===----------------------------------------------------------------------===//
#ifndef LOOM_TEST_RUNTIME_MPITESTUTIL_H
#define LOOM_TEST_RUNTIME_MPITESTUTIL_H

#include "runtime/core/communicator.h"
#include "runtime/cpu/comm_mpi.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <memory>

namespace loom::test {

inline int worldRank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

class Mpi : public ::testing::Test {
protected:
  void SetUp() override {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ASSERT_EQ(size, 4) << "run loom-mpi-tests under mpirun -np 4";
    ASSERT_TRUE(MpiCommunicator::create(MPI_COMM_WORLD, comm).ok());
  }
  void TearDown() override {
    int bad = HasFailure() ? 1 : 0, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (any && !bad)
      ADD_FAILURE() << "another rank failed this test (see its output)";
    if (bad && worldRank() != 0)
      std::fprintf(
          stderr, "loom-mpi-tests: rank %d failed %s\n", worldRank(),
          ::testing::UnitTest::GetInstance()->current_test_info()->name());
    comm.reset();
  }
  std::unique_ptr<Communicator> comm;

  /// Two jobs of 2 ranks, world ranks {0, 1} and {2, 3}: this rank's job as a
  /// communicator of its own (rank 0 or 1 in it), e.g. a dp=2 mesh run twice
  /// side by side.
  void joinHalfJob(std::unique_ptr<Communicator> &half) {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, comm->rank() / 2, comm->rank(), &c);
    ASSERT_TRUE(MpiCommunicator::create(c, half).ok());
    MPI_Comm_free(&c);
  }
};

} // namespace loom::test

#endif // LOOM_TEST_RUNTIME_MPITESTUTIL_H
