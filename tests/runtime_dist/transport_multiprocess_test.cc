// Real multi-process runs of the transports: ranks are child processes of
// transport_peer, over loopback gRPC (port 0, addresses exchanged through
// the test) or one shared-memory segment.
#include <unistd.h>

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/testing/child_process.h"
#include "common/testing/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::dist::testing {
namespace {

using ::testing::HasSubstr;

absl::Time Soon() { return absl::Now() + absl::Seconds(60); }

std::string PeerBinary() { return TRANSPORT_PEER_PATH; }

class Cluster {
 public:
  Cluster(const std::string& transport, int size, std::vector<std::string> extra_args,
          std::vector<int> stalling = {}) {
    group_ = absl::StrCat("kubetrain-mp-", getpid(), "-", ++counter_);
    for (int r = 0; r < size; ++r) {
      std::vector<std::string> argv = {PeerBinary(), "--transport=" + transport,
                                       "--group=" + group_, absl::StrCat("--rank=", r),
                                       absl::StrCat("--size=", size)};
      argv.insert(argv.end(), extra_args.begin(), extra_args.end());
      if (std::find(stalling.begin(), stalling.end(), r) != stalling.end())
        argv.push_back("--stall");
      auto child = test_support::ChildProcess::Spawn(
          {.argv = argv,
           .output_path = (dir_ / absl::StrCat("rank", r, ".stderr")).string(),
           .pipe_stdio = true});
      EXPECT_TRUE(child.ok()) << child.status();
      children_.push_back(std::move(*child));
    }
    if (transport == "grpc") {
      std::vector<std::string> addresses;
      for (auto& c : children_) {
        auto line = c->ReadLine(Soon());
        EXPECT_TRUE(line.ok() && line->rfind("PORT ", 0) == 0) << line.status() << c->Log();
        addresses.push_back(absl::StrCat("127.0.0.1:", line.ok() ? line->substr(5) : "0"));
      }
      for (auto& c : children_)
        EXPECT_TRUE(c->WriteLine("ADDRS " + absl::StrJoin(addresses, ",")).ok());
      addresses_ = addresses;
    }
  }

  test_support::ChildProcess& child(int r) { return *children_[r]; }
  const std::string& address(int r) { return addresses_[r]; }
  int size() const { return static_cast<int>(children_.size()); }

 private:
  static inline int counter_ = 0;
  test_support::TempDir folder_{"kubetrain-runtime-dist"};
  const std::filesystem::path dir_ = folder_.path();
  std::string group_;
  std::vector<std::string> addresses_;
  std::vector<std::unique_ptr<test_support::ChildProcess>> children_;
};

struct Case {
  std::string transport;
  int ranks;
  size_t count;
};

class MultiProcessAllReduceTest : public ::testing::TestWithParam<Case> {};

TEST_P(MultiProcessAllReduceTest, EveryRankGetsTheSum) {
  const Case& c = GetParam();
  Cluster cluster(c.transport, c.ranks, {absl::StrCat("--count=", c.count), "--iters=3"});
  for (int r = 0; r < cluster.size(); ++r) {
    auto code = cluster.child(r).Wait(Soon());
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 0) << "rank " << r << ": " << cluster.child(r).Log();
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, MultiProcessAllReduceTest,
                         ::testing::Values(Case{"grpc", 2, 1}, Case{"grpc", 3, 100003},
                                           Case{"grpc", 4, 3}, Case{"shm", 2, 1},
                                           Case{"shm", 3, 1000003}, Case{"shm", 4, 3}),
                         [](const auto& info) {
                           return absl::StrCat(info.param.transport, "_", info.param.ranks,
                                               "ranks_", info.param.count);
                         });

class KilledPeerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(KilledPeerTest, OthersExitRetryableNamingThePeer) {
  // Rank 2 connects, then stalls until killed; the others wait for it in
  // their all-reduce and must notice its death, not hang.
  Cluster cluster(GetParam(), 3, {"--count=1000", "--iters=1", "--timeout_s=120"}, {2});
  for (int r = 0; r < 3; ++r) {
    auto line = cluster.child(r).ReadLine(Soon());
    ASSERT_TRUE(line.ok()) << line.status() << cluster.child(r).Log();
    ASSERT_EQ(*line, "CONNECTED");
  }
  cluster.child(2).Kill();
  for (int r = 0; r < 2; ++r) {
    // Well inside the peers' own 120 s deadline: the loss itself is seen.
    auto code = cluster.child(r).Wait(absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 138) << cluster.child(r).Log();
    const std::string named = GetParam() == "grpc" ? cluster.address(2) : "peer rank 2";
    // Rank 0 hears of rank 2 directly; rank 1 may instead hear that rank 0
    // left, which names rank 0.
    if (r == 0) {
      EXPECT_THAT(cluster.child(r).Log(), HasSubstr(named));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Transports, KilledPeerTest, ::testing::Values("grpc", "shm"));

// Two runs whose addresses cross (a task of another run at a reused address):
// each answers the other's dial but refuses its stream. Joining fails by the
// join's own deadline, naming the silent peer and the refusal, instead of
// the first receive waiting out the run's.
TEST(CrossedRunsTest, APeerOfAnotherRunFailsTheJoinByItsDeadline) {
  test_support::TempDir folder("kubetrain-runtime-dist");
  std::vector<std::unique_ptr<test_support::ChildProcess>> children;
  for (const auto& [group, rank] : {std::pair{"run-a", 0}, std::pair{"run-b", 1}}) {
    auto child = test_support::ChildProcess::Spawn(
        {.argv = {PeerBinary(), "--transport=grpc", absl::StrCat("--group=", group),
                  absl::StrCat("--rank=", rank), "--size=2", "--timeout_s=120",
                  "--connect_timeout_s=3"},
         .output_path = folder.Path(absl::StrCat(group, ".stderr")),
         .pipe_stdio = true});
    ASSERT_TRUE(child.ok()) << child.status();
    children.push_back(std::move(*child));
  }
  std::vector<std::string> addresses;
  for (auto& c : children) {
    auto line = c->ReadLine(Soon());
    ASSERT_TRUE(line.ok() && line->rfind("PORT ", 0) == 0) << line.status() << c->Log();
    addresses.push_back(absl::StrCat("127.0.0.1:", line->substr(5)));
  }
  for (auto& c : children) ASSERT_TRUE(c->WriteLine("ADDRS " + absl::StrJoin(addresses, ",")).ok());
  for (int r = 0; r < 2; ++r) {
    // Well inside the run's 120 s: the join's 3 s decide.
    auto code = children[r]->Wait(absl::Now() + absl::Seconds(30));
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_EQ(*code, 138) << children[r]->Log();
    EXPECT_THAT(children[r]->Log(), HasSubstr("opened no stream back before the deadline"));
    EXPECT_THAT(children[r]->Log(), HasSubstr(addresses[1 - r]));
    EXPECT_THAT(children[r]->Log(),
                HasSubstr(absl::StrCat("refused here: a stream from rank ", 1 - r, " of group ",
                                       r == 0 ? "run-b" : "run-a")));
  }
}

}  // namespace
}  // namespace kubetrain::dist::testing
