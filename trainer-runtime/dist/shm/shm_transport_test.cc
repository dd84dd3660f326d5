#include "trainer-runtime/dist/shm/shm_transport.h"

#include <unistd.h>

#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "trainer-runtime/dist/collectives.h"

namespace kubetrain::dist {
namespace {

using ::testing::HasSubstr;

std::string UniqueName(absl::string_view test) {
  static int counter = 0;
  return absl::StrCat("kubetrain-test-", getpid(), "-", test, "-", counter++);
}

absl::Time Deadline() { return absl::Now() + absl::Seconds(30); }

// Connects `n` ranks (one thread each, as separate processes would) and runs
// fn(rank, transport) on each.
template <typename Fn>
std::vector<absl::Status> RunGroup(int n, const ShmTransport::Options& options, Fn fn) {
  const std::string name = UniqueName("group");
  std::vector<absl::Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto t = ShmTransport::Connect(name, r, n, options, Deadline());
      if (!t.ok()) {
        statuses[r] = t.status();
        return;
      }
      statuses[r] = fn(r, **t);
    });
  }
  for (auto& t : threads) t.join();
  return statuses;
}

class ShmAllReduceTest : public ::testing::TestWithParam<std::tuple<int, size_t>> {};

TEST_P(ShmAllReduceTest, MatchesReferenceSum) {
  const auto [ranks, count] = GetParam();
  std::mt19937 rng(ranks * 31 + count);
  std::uniform_int_distribution<int> value(-100, 100);
  std::vector<std::vector<float>> data(ranks, std::vector<float>(count));
  std::vector<float> expected(count, 0.0f);
  for (auto& v : data)
    for (size_t i = 0; i < count; ++i) expected[i] += v[i] = static_cast<float>(value(rng));

  // Small rings, so messages wrap round them and stream through in pieces.
  ShmTransport::Options options;
  options.ring_bytes = 4096;
  options.piece_bytes = 1024;
  auto statuses = RunGroup(ranks, options, [&](int r, Transport& t) -> absl::Status {
    for (uint64_t op = 0; op < 3; ++op) {
      std::vector<float> v = data[r];
      // The ring, then the one-round exchange, then the ring again.
      absl::Status s = op % 2 == 0 ? RingAllReduce(t, absl::MakeSpan(v), op, Deadline())
                                   : ExchangeAllReduce(t, absl::MakeSpan(v), op, Deadline());
      if (!s.ok()) return s;
      if (v != expected) return absl::InternalError(absl::StrCat("rank ", r, ": wrong sum"));
    }
    return absl::OkStatus();
  });
  for (int r = 0; r < ranks; ++r) EXPECT_TRUE(statuses[r].ok()) << statuses[r];
}

INSTANTIATE_TEST_SUITE_P(RanksAndSizes, ShmAllReduceTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values<size_t>(0, 1, 3, 1000, 10007)));

TEST(ShmTransportTest, MessagesWithOtherTagsWaitForTheirRecv) {
  auto statuses = RunGroup(2, ShmTransport::Options(), [](int r, Transport& t) -> absl::Status {
    std::vector<std::byte> a(100, std::byte{1}), b(7000, std::byte{2});
    if (r == 0) {
      absl::Status s = t.Send(1, /*tag=*/1, a, Deadline());
      if (!s.ok()) return s;
      return t.Send(1, /*tag=*/2, b, Deadline());
    }
    std::vector<std::byte> got_b(b.size()), got_a(a.size());
    absl::Status s = t.Recv(0, 2, absl::MakeSpan(got_b), Deadline());
    if (!s.ok()) return s;
    s = t.Recv(0, 1, absl::MakeSpan(got_a), Deadline());
    if (!s.ok()) return s;
    if (got_a != a || got_b != b) return absl::InternalError("wrong bytes");
    return absl::OkStatus();
  });
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s;
}

TEST(ShmTransportTest, ClosedPeerIsReportedNotAwaited) {
  auto statuses = RunGroup(2, ShmTransport::Options(), [](int r, Transport& t) -> absl::Status {
    if (r == 1) return absl::OkStatus();  // leaves: its transport closes
    std::vector<std::byte> buf(16);
    return t.Recv(1, 1, absl::MakeSpan(buf), Deadline());
  });
  EXPECT_TRUE(statuses[1].ok());
  EXPECT_EQ(statuses[0].code(), absl::StatusCode::kUnavailable) << statuses[0];
  EXPECT_THAT(std::string(statuses[0].message()), HasSubstr("peer rank 1"));
}

TEST(ShmTransportTest, SizeMismatchIsInvalidArgument) {
  auto statuses = RunGroup(2, ShmTransport::Options(), [](int r, Transport& t) -> absl::Status {
    std::vector<std::byte> buf(r == 0 ? 16 : 32);
    if (r == 0) return t.Send(1, 1, buf, Deadline());
    return t.Recv(0, 1, absl::MakeSpan(buf), Deadline());
  });
  EXPECT_EQ(statuses[1].code(), absl::StatusCode::kInvalidArgument) << statuses[1];
}

TEST(ShmTransportTest, MissingRanksTimeOutNamingThem) {
  auto t = ShmTransport::Connect(UniqueName("alone"), 0, 3, absl::Now() + absl::Milliseconds(50));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("ranks 1, 2 never attached"));
}

}  // namespace
}  // namespace kubetrain::dist
