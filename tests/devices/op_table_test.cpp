// Every backend op (kernels/backend.h) against the CPU backend, from one table (ggml's
// test-backend-ops is the model). A case makes its inputs on the CPU from fixed seeds, with shapes
// that leave tails (sizes that are not multiples of a warp, a block or a vector access, a single
// element, many blocks) and the values an op must handle (NaN of either sign, infinities, values
// that saturate or flush), runs the op through the public API on one device, and records its
// outputs with their rule (tests/support/op_table.h): bit for bit where both backends apply the
// same IEEE operations with RNE stores, else a row of the tolerance table
// (tests/support/tolerances.h). The cuda0 instance of a case x dtype compares the device's run
// with the CPU's; the cpu instance runs it twice on the CPU and expects the same bits (the CPU
// backend is deterministic). Properties every run must have (an aligned and a misaligned view
// give the same bits, a fused kernel equals its unfused form) are checked within each run.
#include "tests/support/op_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "runtime/device.h"
#include "tests/support/op_table_cases.h"

namespace octet {
namespace {

using op_table::name;
using test::OpRun;

// ===================================== the table =====================================

// Every family's rows (tests/devices/op_table_<family>_test.cpp), in one list.
const std::vector<test::OpCase>& all_cases() {
  static const std::vector<test::OpCase> cases = [] {
    std::vector<test::OpCase> all;
    for (auto family :
         {op_table::elementwise_cases, op_table::fp8_cast_cases, op_table::nvfp4_cases,
          op_table::gemm_cases, op_table::nn_cases, op_table::optimizer_cases}) {
      for (test::OpCase& c : family()) all.push_back(std::move(c));
    }
    return all;
  }();
  return cases;
}

// Backend ops with no case, and why.
const std::pair<const char*, const char*> kNotInTheTable[] = {
    {"release_workspace", "frees the GEMM's cached workspace: nothing to compare"},
};

// ===================================== the harness =====================================

struct Instance {
  Device device;
  size_t index;
  DType dtype;
};

std::vector<Instance> instances() {
  std::vector<Instance> out;
  for (Device device : {Device::cpu(), Device::cuda(0)}) {
    for (size_t i = 0; i < all_cases().size(); ++i) {
      for (DType d : all_cases()[i].dtypes) out.push_back({device, i, d});
    }
  }
  return out;
}

std::string instance_name(const ::testing::TestParamInfo<Instance>& info) {
  const Instance& p = info.param;
  return std::string(all_cases()[p.index].name) + "_" + name(p.dtype) + "_" +
         (p.device.is_cpu() ? "cpu" : "cuda" + std::to_string(p.device.index));
}

class OpTable : public ::testing::TestWithParam<Instance> {};

// cuda0: the device's run against the CPU's. cpu: two CPU runs, the same bits.
TEST_P(OpTable, MatchesTheCpu) {
  const Instance& p = GetParam();
  if (p.device.is_cuda() && cuda_device_count() == 0) {
    GTEST_SKIP() << "skipped: " << cuda_status();
  }
  const test::OpCase& c = all_cases()[p.index];
  std::string ops;
  for (const char* op : c.ops) ops += std::string(ops.empty() ? "" : ", ") + op;
  const std::string where = std::string("case ") + c.name + " (" + ops + ") [" + name(p.dtype) +
                            "] on " + (p.device.is_cpu() ? "cpu, run twice" : "cuda:0 vs cpu");
  OpRun want(Device::cpu(), p.dtype);
  c.run(want);
  test::expect_self_consistent(want, where + ": the cpu run");
  OpRun got(p.device, p.dtype);
  c.run(got);
  if (p.device.is_cpu()) {
    test::expect_identical(got, want, where);
  } else {
    test::expect_self_consistent(got, where + ": the device run");
    test::expect_match(got, want, where);
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, OpTable, ::testing::ValuesIn(instances()), instance_name);

#define OCTET_OP_NAME_(ret, op, params) #op,

// Every op of the backend interface has a case, or a reason why not; every case names real ops.
TEST(OpTableCoverage, EveryBackendOpHasACaseOrAReason) {
  const std::vector<std::string> backend_ops = {OCTET_BACKEND_OPS(OCTET_OP_NAME_)};
  std::set<std::string> covered;
  for (const test::OpCase& c : all_cases()) {
    for (const char* op : c.ops) {
      covered.insert(op);
      EXPECT_NE(std::find(backend_ops.begin(), backend_ops.end(), op), backend_ops.end())
          << "case " << c.name << " names " << op << ", which kernels/backend.h does not list";
    }
  }
  for (const auto& [op, why] : kNotInTheTable) covered.insert(op);
  for (const std::string& op : backend_ops) {
    EXPECT_TRUE(covered.count(op)) << op << " has no case in the op table";
  }
}

}  // namespace
}  // namespace octet