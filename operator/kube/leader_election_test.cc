#include "operator/kube/leader_election.h"

#include <memory>

#include "gtest/gtest.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *FakeApiServer::Start();
    client_ = testing::FakeServerClient(server_->url());
  }
  LeaderElectionConfig Config(const std::string& identity) {
    return LeaderElectionConfig{.ns = "kube-system",
                                .lease_name = "kubetrain-operator",
                                .identity = identity,
                                .lease_duration = absl::Seconds(15)};
  }
  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
};

const absl::Time kElectionStart = absl::FromUnixSeconds(1'800'000'000);

TEST_F(LeaderElectionTest, OnlyOneOfTwoCandidatesLeads) {
  LeaderElector a(client_.get(), Config("a"));
  LeaderElector b(client_.get(), Config("b"));
  EXPECT_EQ(*a.TryAcquireOrRenew(kElectionStart), true);
  EXPECT_EQ(*b.TryAcquireOrRenew(kElectionStart), false);
  EXPECT_TRUE(a.IsLeader());
  EXPECT_FALSE(b.IsLeader());
  auto lease = server_->Get("leases", "kube-system", "kubetrain-operator");
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "a");
  EXPECT_EQ((*lease)["spec"]["leaseDurationSeconds"], 15);

  // a renews; b keeps seeing a live lease.
  EXPECT_EQ(*a.TryAcquireOrRenew(kElectionStart + absl::Seconds(5)), true);
  EXPECT_EQ(*b.TryAcquireOrRenew(kElectionStart + absl::Seconds(10)), false);
  EXPECT_EQ(*b.TryAcquireOrRenew(kElectionStart + absl::Seconds(20)), false)
      << "the renewal b saw at t+10 counts from then";
}

TEST_F(LeaderElectionTest, TakesOverAnExpiredLease) {
  LeaderElector a(client_.get(), Config("a"));
  LeaderElector b(client_.get(), Config("b"));
  ASSERT_EQ(*a.TryAcquireOrRenew(kElectionStart), true);
  ASSERT_EQ(*b.TryAcquireOrRenew(kElectionStart), false);
  // a stops renewing (killed). After a lease duration on b's clock, b takes over.
  EXPECT_EQ(*b.TryAcquireOrRenew(kElectionStart + absl::Seconds(14)), false);
  EXPECT_EQ(*b.TryAcquireOrRenew(kElectionStart + absl::Seconds(16)), true);
  auto lease = server_->Get("leases", "kube-system", "kubetrain-operator");
  EXPECT_EQ((*lease)["spec"]["holderIdentity"], "b");
  EXPECT_EQ((*lease)["spec"]["leaseTransitions"], 1);
  // a comes back: it sees b's fresh lease and does not lead.
  EXPECT_EQ(*a.TryAcquireOrRenew(kElectionStart + absl::Seconds(17)), false);
  EXPECT_FALSE(a.IsLeader());
}

TEST_F(LeaderElectionTest, ReleaseLetsTheNextCandidateInAtOnce) {
  LeaderElector a(client_.get(), Config("a"));
  LeaderElector b(client_.get(), Config("b"));
  ASSERT_EQ(*a.TryAcquireOrRenew(kElectionStart), true);
  ASSERT_EQ(*b.TryAcquireOrRenew(kElectionStart), false);
  ASSERT_TRUE(a.Release(kElectionStart + absl::Seconds(1)).ok());
  EXPECT_EQ(*b.TryAcquireOrRenew(kElectionStart + absl::Seconds(2)), true);
}

TEST_F(LeaderElectionTest, ConcurrentWritersConflict) {
  // Both read the same free lease; only one conditional update can win.
  LeaderElector a(client_.get(), Config("a"));
  ASSERT_EQ(*a.TryAcquireOrRenew(kElectionStart), true);
  ASSERT_TRUE(a.Release(kElectionStart).ok());
  auto stale = client_->Get(kLeases, "kube-system", "kubetrain-operator");
  ASSERT_TRUE(stale.ok());
  LeaderElector b(client_.get(), Config("b"));
  ASSERT_EQ(*b.TryAcquireOrRenew(kElectionStart + absl::Seconds(1)), true);
  (*stale)["spec"]["holderIdentity"] = "c";
  EXPECT_EQ(client_->Update(kLeases, "kube-system", *stale, false).status().code(),
            absl::StatusCode::kAborted);
}

TEST_F(LeaderElectionTest, ServerErrorsAreReported) {
  LeaderElector a(client_.get(), Config("a"));
  server_->FailNextRequests(1, 500);
  EXPECT_FALSE(a.TryAcquireOrRenew(kElectionStart).ok());
  EXPECT_EQ(*a.TryAcquireOrRenew(kElectionStart), true);
}

}  // namespace
}  // namespace kubetrain::kube
