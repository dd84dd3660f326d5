#include "trainer-runtime/dist/collectives.h"

#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/dist/in_process_transport.h"

namespace kubetrain::dist {
namespace {

using ::testing::HasSubstr;

// Runs fn(rank) on one thread per rank and returns the statuses.
template <typename Fn>
std::vector<absl::Status> RunRanks(int n, Fn fn) {
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { statuses[r] = fn(r); });
  for (auto& t : threads) t.join();
  return statuses;
}

absl::Time Soon() { return absl::Now() + absl::Seconds(30); }

// Small integers: every summation order gives the same float, so the check
// can be exact.
std::vector<std::vector<float>> RandomInputs(int ranks, size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> value(-1000, 1000);
  std::vector<std::vector<float>> inputs(ranks, std::vector<float>(count));
  for (auto& input : inputs)
    for (float& x : input) x = static_cast<float>(value(rng));
  return inputs;
}

using AllReduceFn = absl::Status (*)(Transport&, absl::Span<float>, uint64_t, absl::Time);

class RingAllReduceTest : public ::testing::TestWithParam<std::tuple<int, size_t>> {
 protected:
  void Check(AllReduceFn all_reduce);
};

TEST_P(RingAllReduceTest, MatchesReferenceSum) { Check(&RingAllReduce); }
TEST_P(RingAllReduceTest, ExchangeMatchesReferenceSum) { Check(&ExchangeAllReduce); }

void RingAllReduceTest::Check(AllReduceFn all_reduce) {
  const auto [ranks, count] = GetParam();
  auto inputs = RandomInputs(ranks, count, static_cast<uint32_t>(ranks * 7919 + count));
  std::vector<float> expected(count, 0.0f);
  for (const auto& input : inputs)
    for (size_t i = 0; i < count; ++i) expected[i] += input[i];

  InProcessHub hub(ranks);
  auto data = inputs;
  auto statuses = RunRanks(ranks, [&](int r) {
    return all_reduce(hub.transport(r), absl::MakeSpan(data[r]), /*op=*/1, Soon());
  });
  for (int r = 0; r < ranks; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << "rank " << r << ": " << statuses[r];
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(data[r][i], expected[i]) << "rank " << r << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RanksAndSizes, RingAllReduceTest,
                         ::testing::Combine(::testing::Range(1, 9),
                                            ::testing::Values<size_t>(0, 1, 2, 3, 5, 7, 16, 17,
                                                                      1000, 4099, 65537)));

TEST(RingAllReduceTest, SuccessiveOpsDoNotMix) {
  constexpr int kRanks = 4;
  InProcessHub hub(kRanks);
  std::vector<std::vector<float>> data(kRanks);
  auto statuses = RunRanks(kRanks, [&](int r) -> absl::Status {
    for (uint64_t op = 0; op < 20; ++op) {
      std::vector<float> v(33, static_cast<float>(r + op));
      absl::Status s = RingAllReduce(hub.transport(r), absl::MakeSpan(v), op, Soon());
      if (!s.ok()) return s;
      // sum over r of (r + op) = 6 + 4 op
      for (float x : v)
        if (x != 6.0f + 4.0f * op) return absl::InternalError("wrong sum");
    }
    return absl::OkStatus();
  });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

class BroadcastTest : public ::testing::TestWithParam<std::tuple<int, int, size_t>> {};

TEST_P(BroadcastTest, EveryRankGetsTheRootsBytes) {
  const auto [ranks, root_param, bytes] = GetParam();
  const int root = root_param < 0 ? ranks - 1 : root_param;  // -1: the last rank
  InProcessHub hub(ranks);
  std::vector<std::vector<std::byte>> data(ranks, std::vector<std::byte>(bytes));
  std::mt19937 rng(bytes);
  for (auto& b : data[root]) b = static_cast<std::byte>(rng());
  auto statuses = RunRanks(ranks, [&](int r) {
    return Broadcast(hub.transport(r), root, absl::MakeSpan(data[r]), /*op=*/3, Soon(),
                     /*chunk_bytes=*/256);
  });
  for (int r = 0; r < ranks; ++r) {
    ASSERT_TRUE(statuses[r].ok()) << statuses[r];
    EXPECT_EQ(data[r], data[root]) << "rank " << r;
  }
}

INSTANTIATE_TEST_SUITE_P(RanksRootsSizes, BroadcastTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5), ::testing::Values(0, -1),
                                            ::testing::Values<size_t>(0, 1, 255, 1000)));

TEST(CollectivesFaultTest, KilledPeerFailsTheRingNamingIt) {
  constexpr int kRanks = 3;
  InProcessHub hub(kRanks);
  hub.Kill(1);
  std::vector<float> v(10, 1.0f);
  // Rank 2 receives from rank 1 in the ring.
  absl::Status s = RingAllReduce(hub.transport(2), absl::MakeSpan(v), 1, Soon());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
}

TEST(CollectivesFaultTest, MissingPeerGivesDeadlineExceeded) {
  InProcessHub hub(2);
  std::vector<float> v(10, 1.0f);
  // Rank 1 never joins: a deadline in the past returns at once.
  absl::Status s = RingAllReduce(hub.transport(0), absl::MakeSpan(v), 1, absl::Now());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
}

TEST(CollectivesFaultTest, SizeMismatchIsAnError) {
  InProcessHub hub(2);
  std::vector<std::vector<float>> data = {std::vector<float>(10), std::vector<float>(12)};
  auto statuses = RunRanks(2, [&](int r) {
    return RingAllReduce(hub.transport(r), absl::MakeSpan(data[r]), 1, Soon());
  });
  EXPECT_TRUE(statuses[0].code() == absl::StatusCode::kInvalidArgument ||
              statuses[1].code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kubetrain::dist
