#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "operator/metrics/metrics_service.h"
#include "operator/metrics/metrics_test_server.h"
#include "proto/kubetrain/v1/metrics_reporter.h"

namespace kubetrain::metrics {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

class RecordingSink : public ReportSink {
 public:
  absl::Status Accept(const MetricsReport& report) override {
    absl::MutexLock lock(&mu_);
    if (!next_error_.ok()) return std::exchange(next_error_, absl::OkStatus());
    reports_.push_back(report);
    return absl::OkStatus();
  }
  std::vector<MetricsReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  void FailNext(absl::Status s) {
    absl::MutexLock lock(&mu_);
    next_error_ = std::move(s);
  }

 private:
  absl::Mutex mu_;
  std::vector<MetricsReport> reports_ ABSL_GUARDED_BY(mu_);
  absl::Status next_error_ ABSL_GUARDED_BY(mu_);
};

// A real gRPC server on 127.0.0.1, port chosen by the kernel.
class MetricsServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    service_ = std::make_unique<MetricsServiceImpl>(&tokens_, &sink_);
    server_ = LoopbackServer::Start(service_.get());
    ASSERT_NE(server_, nullptr);
    address_ = server_->address();
  }

  TokenRegistry tokens_;
  RecordingSink sink_;
  std::unique_ptr<MetricsServiceImpl> service_;
  std::unique_ptr<LoopbackServer> server_;
  std::string address_;
};

TEST_F(MetricsServiceTest, AcceptsAReportWithTheTrialsToken) {
  const std::string token = NewTrialToken();
  tokens_.Register("default/hp", "3", token);
  auto reporter = MetricsReporter::Create(address_, {"default/hp", "3", "master-0"}, token);
  ASSERT_TRUE(reporter->Report(100, {{"accuracy", 0.75}, {"loss", 0.5}}).ok());
  ASSERT_TRUE(
      reporter->Report(200, {{"accuracy", 0.8}}, std::chrono::seconds(10), /*final=*/true).ok());
  std::vector<MetricsReport> got = sink_.reports();
  ASSERT_EQ(got.size(), 2u);
  // The trainer's last evaluation says so.
  EXPECT_FALSE(got[0].final);
  EXPECT_TRUE(got[1].final);
  EXPECT_EQ(got[0].job, "default/hp");
  EXPECT_EQ(got[0].trial, "3");
  EXPECT_EQ(got[0].task, "master-0");
  EXPECT_EQ(got[0].step, 100);
  EXPECT_THAT(got[0].values, ElementsAre(Pair("accuracy", 0.75), Pair("loss", 0.5)));
  EXPECT_EQ(got[1].step, 200);
}

TEST_F(MetricsServiceTest, AWrongTokenIsPermissionDenied) {
  const std::string token_a = NewTrialToken();
  const std::string token_b = NewTrialToken();
  ASSERT_NE(token_a, token_b);
  tokens_.Register("default/hp", "1", token_a);
  tokens_.Register("default/hp", "2", token_b);
  // Trial 2's token used to report as trial 1.
  auto impostor = MetricsReporter::Create(address_, {"default/hp", "1", "master-0"}, token_b);
  absl::Status s = impostor->Report(1, {{"accuracy", 1.0}});
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(s.message(), HasSubstr(address_));
  // Unknown trial, unknown job, empty token.
  EXPECT_EQ(MetricsReporter::Create(address_, {"default/hp", "9", "m"}, token_a)
                ->Report(1, {{"a", 1.0}})
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(MetricsReporter::Create(address_, {"other/hp", "1", "m"}, token_a)
                ->Report(1, {{"a", 1.0}})
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(MetricsReporter::Create(address_, {"default/hp", "1", "m"}, "")
                ->Report(1, {{"a", 1.0}})
                .code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(sink_.reports().empty());
}

TEST_F(MetricsServiceTest, RevokedTrialsCanNoLongerReport) {
  const std::string token = NewTrialToken();
  tokens_.Register("ns/job", "1", token);
  auto reporter = MetricsReporter::Create(address_, {"ns/job", "1", "master-0"}, token);
  ASSERT_TRUE(reporter->Report(1, {{"m", 1.0}}).ok());
  tokens_.Revoke("ns/job", "1");
  EXPECT_EQ(reporter->Report(2, {{"m", 2.0}}).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(sink_.reports().size(), 1u);
}

TEST_F(MetricsServiceTest, RejectsMalformedReports) {
  const std::string token = NewTrialToken();
  tokens_.Register("ns/job", "1", token);
  auto reporter = MetricsReporter::Create(address_, {"ns/job", "1", "master-0"}, token);
  EXPECT_EQ(reporter->Report(1, {}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reporter->Report(-1, {{"m", 1.0}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reporter->Report(1, {{"m", std::nan("")}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(reporter->Report(1, {{"", 1.0}}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(sink_.reports().empty());
}

TEST_F(MetricsServiceTest, TheSinksErrorReachesTheTrial) {
  const std::string token = NewTrialToken();
  tokens_.Register("ns/job", "1", token);
  sink_.FailNext(absl::UnavailableError("not the leader"));
  auto reporter = MetricsReporter::Create(address_, {"ns/job", "1", "master-0"}, token);
  absl::Status s = reporter->Report(1, {{"m", 1.0}});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("not the leader"));
}

TEST_F(MetricsServiceTest, ReporterFromEnvironment) {
  const std::string token = NewTrialToken();
  tokens_.Register("ns/job", "7", token);
  std::map<std::string, std::string> env = {{"KUBETRAIN_METRICS_ADDR", address_},
                                            {"KUBETRAIN_METRICS_TOKEN", token}};
  auto getenv = [&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  absl::StatusOr<std::unique_ptr<MetricsReporter>> reporter =
      MetricsReporter::FromEnvironment({"ns/job", "7", "worker-1"}, getenv);
  ASSERT_TRUE(reporter.ok()) << reporter.status();
  ASSERT_TRUE((*reporter)->Report(5, {{"m", 0.25}}).ok());
  ASSERT_EQ(sink_.reports().size(), 1u);
  EXPECT_EQ(sink_.reports()[0].task, "worker-1");

  env.erase("KUBETRAIN_METRICS_TOKEN");
  absl::Status missing = MetricsReporter::FromEnvironment({"ns/job", "7", "w"}, getenv).status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(missing.message(), HasSubstr("KUBETRAIN_METRICS_TOKEN"));
  env.erase("KUBETRAIN_METRICS_ADDR");
  EXPECT_THAT(MetricsReporter::FromEnvironment({"ns/job", "7", "w"}, getenv).status().message(),
              HasSubstr("KUBETRAIN_METRICS_ADDR"));
}

TEST(TokenTest, TokensAreLongHexAndDistinct) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    const std::string t = NewTrialToken();
    EXPECT_THAT(t, ::testing::MatchesRegex("[0-9a-f]{32}"));
    seen.insert(t);
  }
  EXPECT_EQ(seen.size(), 100u);
}

// An authority that is not answering for trials right now (an operator
// replica that is not the leader).
class UnavailableAuthority : public TrialAuthority {
 public:
  absl::Status Authorize(const std::string&, const std::string&,
                         const std::string&) const override {
    return absl::UnavailableError("not the leader");
  }
};

TEST(MetricsServiceAuthorityTest, AnAuthorityErrorOtherThanDenialReachesTheCaller) {
  UnavailableAuthority authority;
  RecordingSink sink;
  MetricsServiceImpl service(&authority, &sink);
  std::unique_ptr<LoopbackServer> server = LoopbackServer::Start(&service);
  ASSERT_NE(server, nullptr);
  absl::Status status =
      MetricsReporter::Create(server->address(), {"default/hp", "1", "master-0"}, NewTrialToken())
          ->Report(1, {{"accuracy", 0.5}}, std::chrono::seconds(30));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(status.message()), HasSubstr("not the leader"));
  EXPECT_THAT(std::string(status.message()), HasSubstr("\"default/hp\""));
  EXPECT_TRUE(sink.reports().empty());
}

TEST(TokenTest, TokensEqualNeedsTheSameNonEmptyString) {
  EXPECT_TRUE(TokensEqual("abc", "abc"));
  EXPECT_FALSE(TokensEqual("abc", "abd"));
  EXPECT_FALSE(TokensEqual("abc", "abcd"));
  EXPECT_FALSE(TokensEqual("", ""));
}

TEST(TokenTest, RegistryKeysDoNotCollide) {
  TokenRegistry tokens;
  tokens.Register("a/b", "c", "t1");
  EXPECT_TRUE(tokens.Check("a/b", "c", "t1"));
  EXPECT_FALSE(tokens.Check("a", "b/c", "t1"));
  EXPECT_FALSE(tokens.Check("a/b", "c", "t2"));
  EXPECT_FALSE(tokens.Check("a/b", "c", "t1x"));
}

}  // namespace
}  // namespace kubetrain::metrics
