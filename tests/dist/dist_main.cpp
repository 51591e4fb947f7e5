// GoogleTest entry point of the data-parallel tests, run under mpirun -np 2 (or more): every rank
// runs every test, whose collectives line up across ranks. Rank 0 reports as usual; the others
// print only their failures, prefixed with the rank. The exit status is non-zero when a test
// failed on any rank, and when the program was not started as several processes (one process
// would compare each rank with itself, a check that cannot fail).
#include <gtest/gtest.h>

#include <cstdio>
#include <span>

#include "runtime/log.h"
#include "tests/dist/dist_util.h"

namespace {

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "rank %d: %s:%d: failure\n%s\n", rank_,
                 result.file_name() != nullptr ? result.file_name() : "?", result.line_number(),
                 result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  octet::set_log_level("error");
  octet::Communicator& world = *octet::test::dist::world();
  if (world.size() < 2) {
    std::fprintf(stderr,
                 "octet_dist_tests: started as one process; run it under mpirun -np 2 (ctest "
                 "does)\n");
    return 1;
  }
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailurePrinter(world.rank()));
  }
  const int status = RUN_ALL_TESTS();
  double failed[1] = {status != 0 ? 1.0 : 0.0};
  world.all_reduce(std::span<double>(failed, 1), octet::ReduceOp::kMax);
  return failed[0] != 0.0 ? 1 : 0;
}
