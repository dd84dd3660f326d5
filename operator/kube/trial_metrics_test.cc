#include "operator/kube/trial_metrics.h"

#include <chrono>
#include <memory>
#include <set>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/kube/rest_client.h"
#include "operator/kube/test_objects.h"
#include "operator/metrics/metrics_test_server.h"
#include "operator/tuner/tuner.h"
#include "proto/kubetrain/v1/metrics_reporter.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using testing::TerminatedPodStatus;
using testing::TuningJobObject;

TEST(TrialTokenIssuerTest, OneTokenPerTrialAndIssuer) {
  TrialTokenIssuer issuer, other;
  const std::string token = issuer.Token("uid-1", "1");
  EXPECT_THAT(token, MatchesRegex("[0-9a-f]{32}"));
  EXPECT_EQ(issuer.Token("uid-1", "1"), token);
  std::set<std::string> distinct = {token,
                                    issuer.Token("uid-1", "2"),
                                    issuer.Token("uid-2", "1"),
                                    issuer.Token("uid-1/", ""),
                                    issuer.Token("uid-", "1/1"),
                                    other.Token("uid-1", "1")};
  EXPECT_EQ(distinct.size(), 6u);
}

// The real controller on the fake API server, and the real Metrics service
// (MetricsServiceImpl over ClusterTrialMetrics) on a loopback gRPC port.
class ClusterTrialMetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = *FakeApiServer::Start({});
    client_ = testing::FakeServerClient(server_->url());
    ControllerOptions options;
    options.ns = "ns1";
    options.workers = 2;
    options.reconcile.trial_token = [this](const std::string& uid, const std::string& trial) {
      return issuer_.Token(uid, trial);
    };
    options.reconcile.tuner_factory = [](const v1::HyperparameterSpec& spec, uint64_t seed) {
      return tuner::Tuner::Create(spec, seed);
    };
    controller_ = std::make_unique<Controller>(client_.get(), options, &studies_);
    studies_.SetListener([this](const std::string& uid) { controller_->EnqueueByUid(uid); });
    trial_metrics_ = std::make_unique<ClusterTrialMetrics>(controller_.get(), &studies_);
    service_ =
        std::make_unique<metrics::MetricsServiceImpl>(trial_metrics_.get(), trial_metrics_.get());
    grpc_server_ = metrics::LoopbackServer::Start(service_.get());
    ASSERT_NE(grpc_server_, nullptr);
  }
  void TearDown() override {
    grpc_server_.reset();
    controller_->Stop();
  }

  // One report of `accuracy`, as trial `trial`'s master sends it.
  absl::Status Report(const std::string& job, const std::string& trial, const std::string& token,
                      int64_t step, double accuracy) {
    return metrics::MetricsReporter::Create(grpc_server_->address(), {job, trial, "master-0"},
                                            token)
        ->Report(step, {{"accuracy", accuracy}}, std::chrono::seconds(30));
  }

  // The token in the spec of trial `trial`'s master pod ("" while none).
  std::string PodToken(const std::string& trial) {
    for (const json& pod : server_->List("pods", "ns1")) {
      if (pod["metadata"]["labels"].value("kubetrain.io/trial-id", "") != trial) continue;
      for (const json& var : pod["spec"]["containers"][0].value("env", json::array())) {
        if (var["name"] == "KUBETRAIN_METRICS_TOKEN") return var["value"];
      }
    }
    return "";
  }

  std::string MasterPod(const std::string& trial) {
    for (const json& pod : server_->List("pods", "ns1")) {
      if (pod["metadata"]["labels"].value("kubetrain.io/trial-id", "") == trial) {
        return pod["metadata"]["name"];
      }
    }
    return "";
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
  TrialTokenIssuer issuer_;
  InMemoryStudyStore studies_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<ClusterTrialMetrics> trial_metrics_;
  std::unique_ptr<metrics::MetricsServiceImpl> service_;
  std::unique_ptr<metrics::LoopbackServer> grpc_server_;
};

TEST_F(ClusterTrialMetricsTest, ATrialsReportReachesItsStatusOnlyWithItsOwnToken) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", TuningJobObject("hp", 2, 2)).ok());
  ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  ASSERT_TRUE(server_->WaitUntil([&] { return !PodToken("1").empty() && !PodToken("2").empty(); }));
  const std::string token1 = PodToken("1"), token2 = PodToken("2");
  ASSERT_NE(token1, token2);
  // The service reads the pods from the controller's cache, which follows the
  // server by watch.
  ASSERT_TRUE(server_->WaitUntil([&] {
    return controller_->TrialPodHasToken("ns1/hp", "1", token1) &&
           controller_->TrialPodHasToken("ns1/hp", "2", token2);
  }));

  // Not leading yet: the caller is told to retry, and nothing is recorded.
  absl::Status standby = Report("ns1/hp", "1", token1, 10, 0.5);
  EXPECT_EQ(standby.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(standby.message()), HasSubstr("not the leader"));

  trial_metrics_->SetLeading(true);
  // Trial 2's token cannot report for trial 1, nor for another job.
  EXPECT_EQ(Report("ns1/hp", "1", token2, 10, 0.99).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Report("ns1/other", "2", token2, 10, 0.99).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(Report("ns1/hp", "1", "", 10, 0.99).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(studies_.TrialMetrics(*controller_->CachedJobUid("ns1/hp")).empty());

  absl::Status accepted = Report("ns1/hp", "1", token1, 20, 0.75);
  ASSERT_TRUE(accepted.ok()) << accepted;
  const std::string pod = MasterPod("1");
  ASSERT_FALSE(pod.empty());
  ASSERT_TRUE(
      server_->MergePatch("pods", "ns1", pod, TerminatedPodStatus("Succeeded", 0), "status").ok());
  // The trial completes with the reported value as its objective.
  auto trial_one = [&]() -> json {
    auto job = server_->Get("trainingjobs", "ns1", "hp");
    if (!job.ok()) return json();
    json trials = (*job)["status"]["trainingOutput"].value("trials", json::array());
    for (const json& t : trials) {
      if (t.value("trialId", "") == "1") return t;
    }
    return json();
  };
  ASSERT_TRUE(server_->WaitUntil([&] { return trial_one().value("state", "") == "SUCCEEDED"; }))
      << trial_one();
  EXPECT_EQ(trial_one()["finalMetric"]["objectiveValue"], 0.75);
  EXPECT_EQ(trial_one()["finalMetric"]["trainingStep"], 20);  // a number, as the CRD says
}

TEST_F(ClusterTrialMetricsTest, AReportIsConfirmedOnlyOnceTheJobsStatusHoldsIt) {
  ASSERT_TRUE(server_->Create("trainingjobs", "ns1", TuningJobObject("hp", 2, 2)).ok());
  ASSERT_TRUE(controller_->Start(absl::Seconds(30)));
  // A second controller that only watches (no workers): it never writes the
  // status, as a leader that stops before its next reconcile.
  ControllerOptions watch_only;
  watch_only.ns = "ns1";
  watch_only.workers = 0;
  InMemoryStudyStore studies;
  Controller watcher(client_.get(), watch_only, &studies);
  ASSERT_TRUE(watcher.Start(absl::Seconds(30)));
  // Until trial 1 is in the status it sees, there is nothing it could hold.
  ASSERT_TRUE(server_->WaitUntil([&] {
    return !watcher.TrialReportRecorded("ns1/hp", "1", 5, {{"accuracy", 0.4}});
  }));
  ClusterTrialMetrics quiet(&watcher, &studies, absl::Milliseconds(300));
  quiet.SetLeading(true);

  metrics::MetricsReport report{.job = "ns1/hp", .trial = "1", .task = "master-0", .step = 5};
  // Without the metric tag there is nothing status would keep.
  report.values = {{"loss", 0.3}};
  EXPECT_TRUE(quiet.Accept(report).ok());
  report.values = {{"accuracy", 0.4}};
  absl::Status unrecorded = quiet.Accept(report);
  EXPECT_EQ(unrecorded.code(), absl::StatusCode::kUnavailable) << unrecorded;
  EXPECT_THAT(std::string(unrecorded.message()), HasSubstr("not yet recorded"));
  // The report is still held, for the reconcile that records it.
  EXPECT_EQ(studies.TrialMetrics(*watcher.CachedJobUid("ns1/hp")).at("1").size(), 2u);
  report.job = "ns1/gone";
  EXPECT_EQ(quiet.Accept(report).code(), absl::StatusCode::kNotFound);
  watcher.Stop();
}

}  // namespace
}  // namespace kubetrain::kube
