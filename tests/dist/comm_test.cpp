// The MPI communicator across real ranks: every collective against a reference worked out on
// each rank from every rank's inputs (a pure function of rank and index), results the same bits
// on every rank, padded and tiny sizes, NaN in a max, non-blocking collectives in flight on one
// communicator and a duplicate while others run, the bytes it counts, and the checks that every
// rank agrees (the first difference named on every rank, a failure on one rank seen by all).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "tests/dist/dist_util.h"

namespace octet::test::dist {
namespace {

using ::testing::HasSubstr;

// Rank r's element i: magnitudes that differ by rank, so sums round.
float value(int rank, int64_t i) {
  return static_cast<float>((i % 13) - 6) * 0.37f * static_cast<float>(rank + 1) +
         static_cast<float>(rank) * 1e7f * static_cast<float>(i % 3 == 0);
}

// Rank r's element i stored as T (f32, i32 or i64).
template <typename T>
T element(int rank, int64_t i) {
  const float v = value(rank, i);
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, int32_t>) return static_cast<int32_t>(v / 64);
  return static_cast<int64_t>(v) * 1000003;
}

Tensor values_of(int rank, int64_t n, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty({n}, dtype);
  for (int64_t i = 0; i < n; ++i) {
    if (dtype == DType::kF32) t.data_as<float>()[i] = element<float>(rank, i);
    if (dtype == DType::kI32) t.data_as<int32_t>()[i] = element<int32_t>(rank, i);
    if (dtype == DType::kI64) t.data_as<int64_t>()[i] = element<int64_t>(rank, i);
  }
  return t;
}

// Element i over every rank, combined in rank order.
template <typename T>
T reference(ReduceOp op, int64_t i, int ranks) {
  T acc = element<T>(0, i);
  for (int r = 1; r < ranks; ++r) {
    const T x = element<T>(r, i);
    acc = op == ReduceOp::kMax ? (x > acc ? x : acc) : static_cast<T>(acc + x);
  }
  if (op == ReduceOp::kAvg) acc = static_cast<T>(acc / static_cast<T>(ranks));
  return acc;
}

template <typename T>
void expect_reduced(const Tensor& got, ReduceOp op) {
  const int ranks = world()->size();
  int64_t bad = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const T want = reference<T>(op, i, ranks);
    if (std::memcmp(&got.data_as<T>()[i], &want, sizeof(T)) != 0) ++bad;
  }
  EXPECT_EQ(bad, 0) << "of " << got.numel() << " elements, " << reduce_op_name(op);
}

TEST(Comm, AllReduceIsTheRankOrderReductionOnEveryRank) {
  // 1 and 3 are not multiples of the rank count (padding); 4097 spans several parts.
  for (const int64_t n : {1, 3, 64, 4097}) {
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      Tensor t = values_of(world()->rank(), n);
      world()->all_reduce(t, op);
      expect_reduced<float>(t, op);
      EXPECT_TRUE(same_on_all_ranks(t)) << n << " " << reduce_op_name(op);
    }
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
      Tensor i32 = values_of(world()->rank(), n, DType::kI32);
      world()->all_reduce(i32, op);
      expect_reduced<int32_t>(i32, op);
      Tensor i64 = values_of(world()->rank(), n, DType::kI64);
      world()->all_reduce(i64, op);
      expect_reduced<int64_t>(i64, op);
    }
  }
}

TEST(Comm, MaxPropagatesNaNAndSumOfHostValuesIsExact) {
  Tensor t = Tensor::from_floats({1.f, 2.f, 3.f}, {3});
  if (world()->rank() == world()->size() - 1) t.data_as<float>()[1] = NAN;
  world()->all_reduce(t, ReduceOp::kMax);
  EXPECT_FALSE(std::isnan(t.data_as<float>()[0]));
  EXPECT_TRUE(std::isnan(t.data_as<float>()[1]));

  double v[2] = {0.25 * (world()->rank() + 1), -1.0};
  world()->all_reduce(std::span<double>(v, 2), ReduceOp::kSum);
  const int n = world()->size();
  EXPECT_EQ(v[0], 0.25 * n * (n + 1) / 2);
  EXPECT_EQ(v[1], -1.0 * n);
}

TEST(Comm, ReduceScatterGivesEachRankItsPartAndAllGatherEveryonesPart) {
  const int ranks = world()->size(), rank = world()->rank();
  const int64_t part = 37;
  Tensor in = values_of(rank, part * ranks);
  Tensor out = Tensor::empty({part}, DType::kF32);
  world()->reduce_scatter(in, out, ReduceOp::kAvg);
  int64_t bad = 0;
  for (int64_t i = 0; i < part; ++i) {
    const float want = reference<float>(ReduceOp::kAvg, rank * part + i, ranks);
    if (std::memcmp(&out.data_as<float>()[i], &want, 4) != 0) ++bad;
  }
  EXPECT_EQ(bad, 0);

  Tensor gathered = Tensor::empty({part * ranks}, DType::kE4M3);
  Tensor mine = Tensor::empty({part}, DType::kE4M3);
  for (int64_t i = 0; i < part; ++i)
    mine.data_as<uint8_t>()[i] = static_cast<uint8_t>(rank * 50 + i);
  world()->all_gather(mine, gathered);
  bad = 0;
  for (int r = 0; r < ranks; ++r) {
    for (int64_t i = 0; i < part; ++i) {
      bad += gathered.data_as<uint8_t>()[r * part + i] != static_cast<uint8_t>(r * 50 + i);
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(Comm, BroadcastFromTheLastRank) {
  const int root = world()->size() - 1;
  Tensor t = values_of(world()->rank(), 100);
  world()->broadcast(t, root);
  const Tensor want = values_of(root, 100);
  EXPECT_EQ(std::memcmp(t.data(), want.data(), t.nbytes()), 0);
  std::string text = world()->rank() == root ? "from the root" : "";
  broadcast_string(*world(), text, root);
  EXPECT_EQ(text, "from the root");
}

TEST(Comm, NonBlockingCollectivesOverlapAcrossDuplicatesAndFinishInAnyOrder) {
  const int rank = world()->rank();
  const std::shared_ptr<Communicator> lane = world()->duplicate();
  Tensor a = values_of(rank, 1000), b = values_of(rank, 333), c = values_of(rank, 4097);
  Tensor d = values_of(rank, 5);
  std::unique_ptr<PendingCollective> pa = world()->start_all_reduce(a, ReduceOp::kSum);
  std::unique_ptr<PendingCollective> pc = lane->start_all_reduce(c, ReduceOp::kMax);
  std::unique_ptr<PendingCollective> pb = world()->start_all_reduce(b, ReduceOp::kAvg);
  world()->all_reduce(d, ReduceOp::kSum);  // blocking, while a, b and c are in flight
  pc->test();
  pb->wait();
  pc->wait();
  pa->wait();
  EXPECT_TRUE(pa->test() && pb->test() && pc->test());
  expect_reduced<float>(a, ReduceOp::kSum);
  expect_reduced<float>(b, ReduceOp::kAvg);
  expect_reduced<float>(c, ReduceOp::kMax);
  expect_reduced<float>(d, ReduceOp::kSum);
}

TEST(Comm, CountsTheBytesItSends) {
  const int ranks = world()->size();
  const std::shared_ptr<Communicator> lane = world()->duplicate();
  const int64_t before = world()->bytes_sent();
  Tensor t = values_of(world()->rank(), 10 * ranks + 1);  // padded to 11 elements per rank
  lane->all_reduce(t, ReduceOp::kSum);
  // The all-to-all and the all-gather each send this rank's 11-element parts to the others,
  // and a duplicate counts with the communicator it came from.
  EXPECT_EQ(world()->bytes_sent() - before, 2 * (ranks - 1) * 11 * 4);
}

TEST(Comm, RefusesTensorsItCannotReduce) {
  Tensor bf16 = Tensor::zeros({4}, DType::kBF16);
  const std::string error = error_of([&] { world()->all_reduce(bf16, ReduceOp::kSum); });
  EXPECT_THAT(error, HasSubstr("cannot be reduced (f32, i32 or i64 tensors)"));
}

TEST(Comm, RequireSameNamesTheFirstDifferenceOnEveryRank) {
  const int last = world()->size() - 1;
  const bool odd_one = world()->rank() == last;
  std::vector<std::pair<std::string, std::string>> items = {
      {"a", "1"}, {"b", odd_one ? "3" : "2"}, {"c", odd_one ? "x" : "y"}};
  EXPECT_THAT(error_of([&] { require_same_on_all_ranks(*world(), items, "the settings"); }),
              HasSubstr("the settings differ across ranks: rank " + std::to_string(last) +
                        " has b=3 but rank 0 has b=2"));
  items = {{"a", "1"}, {"b", "2"}};
  if (odd_one) items.emplace_back("extra", "1");
  EXPECT_THAT(error_of([&] { require_same_on_all_ranks(*world(), items, "the settings"); }),
              HasSubstr("has \"extra\" at position 2 but rank 0 has nothing"));
  items.resize(2);
  EXPECT_EQ(error_of([&] { require_same_on_all_ranks(*world(), items, "the settings"); }), "");
}

TEST(Comm, RunCollectivelyThrowsTheLowestFailingRanksErrorEverywhere) {
  const int last = world()->size() - 1;
  const std::string error = error_of([&] {
    run_collectively(*world(), [&] {
      if (world()->rank() == last) OCTET_FAIL("cannot open the file here");
    });
  });
  EXPECT_THAT(error, HasSubstr("rank " + std::to_string(last) + ": "));
  EXPECT_THAT(error, HasSubstr("cannot open the file here"));
  EXPECT_EQ(error_of([&] { run_collectively(*world(), [] {}); }), "");
}

}  // namespace
}  // namespace octet::test::dist
