// MetricsReporter and QueuedMetricsReporter against a real Metrics service
// on 127.0.0.1 (port chosen by the kernel), with authorities and sinks that
// fail on demand the way an operator does during a leader change.
#include "proto/kubetrain/v1/metrics_reporter.h"

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "operator/metrics/metrics_service.h"
#include "operator/metrics/metrics_test_server.h"

namespace kubetrain::metrics {
namespace {

using std::chrono::milliseconds;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kJob[] = "ns/hp";
constexpr char kTrial[] = "3";

// Answers UNAVAILABLE ("not the leader") to the first `unavailable` calls,
// then asks the token registry. Counts calls.
class FlakyAuthority : public TrialAuthority {
 public:
  absl::Status Authorize(const std::string& job, const std::string& trial,
                         const std::string& token) const override {
    if (calls_.fetch_add(1) < unavailable_) return absl::UnavailableError("not the leader");
    return tokens_.Authorize(job, trial, token);
  }
  void set_unavailable(int n) { unavailable_ = n; }
  int calls() const { return calls_.load(); }
  TokenRegistry& tokens() { return tokens_; }

 private:
  std::atomic<int> unavailable_{0};
  mutable std::atomic<int> calls_{0};
  TokenRegistry tokens_;
};

// Records accepted reports. Can hold the next report until released, and
// answer UNAVAILABLE for one step forever.
class GatedSink : public ReportSink {
 public:
  absl::Status Accept(const MetricsReport& report) override {
    absl::MutexLock lock(&mu_);
    if (report.step == failing_step_) return absl::UnavailableError("not the leader");
    if (hold_) {
      entered_.Notify();
      mu_.Await(absl::Condition(
          +[](bool* hold) { return !*hold; }, &hold_));
    }
    reports_.push_back(report);
    return absl::OkStatus();
  }
  // The next report waits in Accept until Release; entered() fires when it
  // arrives.
  void Hold() {
    absl::MutexLock lock(&mu_);
    hold_ = true;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    hold_ = false;
  }
  absl::Notification& entered() { return entered_; }
  void FailStep(int64_t step) {
    absl::MutexLock lock(&mu_);
    failing_step_ = step;
  }
  std::vector<int64_t> steps() {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t> steps;
    for (const MetricsReport& r : reports_) steps.push_back(r.step);
    return steps;
  }
  std::vector<MetricsReport> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  int64_t failing_step_ ABSL_GUARDED_BY(mu_) = -1;
  absl::Notification entered_;
  std::vector<MetricsReport> reports_ ABSL_GUARDED_BY(mu_);
};

class MetricsReporterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    token_ = NewTrialToken();
    authority_.tokens().Register(kJob, kTrial, token_);
    service_ = std::make_unique<MetricsServiceImpl>(&authority_, &sink_);
    ASSERT_TRUE(Start(0));
  }

  // Serves on `port` (0: any free one); address_ is where.
  bool Start(int port) {
    server_ = LoopbackServer::Start(service_.get(), port);
    if (server_ == nullptr) return false;
    address_ = server_->address();
    return true;
  }
  // Connections to address_ are refused from now on.
  void Stop() { server_.reset(); }

  std::unique_ptr<MetricsReporter> Reporter(const std::string& token) {
    return MetricsReporter::Create(address_, {kJob, kTrial, "master-0"}, token);
  }

  FlakyAuthority authority_;
  GatedSink sink_;
  std::string token_;
  std::unique_ptr<MetricsServiceImpl> service_;
  std::unique_ptr<LoopbackServer> server_;
  std::string address_;
};

// Backoffs asked for, without waiting: the schedule is checked, not timed.
struct RecordedWaits {
  std::vector<milliseconds> waits;
  MetricsReporter::RetryOptions Options() {
    MetricsReporter::RetryOptions options;
    options.initial_backoff = milliseconds(100);
    options.max_backoff = milliseconds(400);
    options.wait = [this](milliseconds d, const absl::Status&) {
      waits.push_back(d);
      return true;
    };
    return options;
  }
};

TEST_F(MetricsReporterTest, RetriesWhileTheOperatorIsNotTheLeader) {
  authority_.set_unavailable(4);
  RecordedWaits recorded;
  absl::Status s = Reporter(token_)->ReportWithRetry(7, {{"accuracy", 0.5}}, recorded.Options());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(authority_.calls(), 5);
  EXPECT_THAT(recorded.waits, ElementsAre(milliseconds(100), milliseconds(200), milliseconds(400),
                                          milliseconds(400)));
  ASSERT_EQ(sink_.reports().size(), 1u);
  EXPECT_EQ(sink_.reports()[0].step, 7);
}

TEST_F(MetricsReporterTest, GivesUpAtTheDeadlineWithTheLastError) {
  authority_.set_unavailable(1000);
  // A clock that moves only when the reporter waits.
  milliseconds clock{0};
  MetricsReporter::RetryOptions options;
  options.deadline = milliseconds(1000);
  options.initial_backoff = milliseconds(100);
  options.max_backoff = milliseconds(400);
  options.now = [&clock] { return std::chrono::steady_clock::time_point(clock); };
  std::vector<milliseconds> waits;
  options.wait = [&](milliseconds d, const absl::Status&) {
    waits.push_back(d);
    clock += d;
    return true;
  };
  absl::Status s = Reporter(token_)->ReportWithRetry(7, {{"accuracy", 0.5}}, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr(address_));
  EXPECT_THAT(s.message(), HasSubstr("not the leader"));
  EXPECT_THAT(s.message(), HasSubstr("5 attempts"));
  // 100 + 200 + 400 + 300 (what is left) = the deadline; one last attempt.
  EXPECT_THAT(waits, ElementsAre(milliseconds(100), milliseconds(200), milliseconds(400),
                                 milliseconds(300)));
  EXPECT_EQ(authority_.calls(), 5);
}

TEST_F(MetricsReporterTest, PermissionDeniedAndInvalidArgumentAreNotRetried) {
  RecordedWaits recorded;
  absl::Status denied =
      Reporter("not-the-token")->ReportWithRetry(1, {{"accuracy", 0.5}}, recorded.Options());
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(denied.message(), HasSubstr(address_));
  EXPECT_THAT(denied.message(), HasSubstr("KUBETRAIN_METRICS_TOKEN"));
  EXPECT_EQ(authority_.calls(), 1);

  absl::Status invalid = Reporter(token_)->ReportWithRetry(1, {}, recorded.Options());
  EXPECT_EQ(invalid.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(authority_.calls(), 2);
  EXPECT_TRUE(recorded.waits.empty());
  EXPECT_TRUE(sink_.reports().empty());
}

TEST_F(MetricsReporterTest, ReachesAnOperatorThatComesBackAfterARefusedConnection) {
  const std::string address = address_;
  const int port = server_->port();
  Stop();
  auto reporter = Reporter(token_);
  absl::Status refused = reporter->Report(1, {{"accuracy", 0.5}});
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(refused.message(), HasSubstr(address));

  // The operator is back (same address) by the time of the first retry.
  MetricsReporter::RetryOptions options;
  options.initial_backoff = milliseconds(50);
  bool restarted = false;
  options.wait = [&](milliseconds d, const absl::Status&) {
    if (!restarted) restarted = Start(port);
    std::this_thread::sleep_for(d);  // the backoff itself, as in production
    return true;
  };
  absl::Status s = reporter->ReportWithRetry(2, {{"accuracy", 0.75}}, options);
  ASSERT_TRUE(restarted);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(sink_.steps(), ElementsAre(2));
}

TEST_F(MetricsReporterTest, CancelEndsTheAttemptInFlight) {
  sink_.Hold();
  auto reporter = Reporter(token_);
  absl::Status result;
  std::thread sender([&] { result = reporter->Report(1, {{"accuracy", 0.5}}); });
  sink_.entered().WaitForNotification();
  reporter->Cancel();
  sender.join();
  sink_.Release();
  EXPECT_EQ(result.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(reporter->Report(2, {{"accuracy", 0.5}}).code(), absl::StatusCode::kCancelled);
}

TEST(MetricsReporterIdentityTest, FromTheReplicaEnvironment) {
  std::map<std::string, std::string> env = {{"KUBETRAIN_NAMESPACE", "team-a"},
                                            {"KUBETRAIN_JOB_NAME", "fmnist"},
                                            {"KUBETRAIN_TRIAL_ID", "12"},
                                            {"KUBETRAIN_TASK_TYPE", "chief"},
                                            {"KUBETRAIN_TASK_INDEX", "0"}};
  auto getenv = [&env](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  absl::StatusOr<MetricsReporter::Identity> identity =
      MetricsReporter::Identity::FromEnvironment(getenv);
  ASSERT_TRUE(identity.ok()) << identity.status();
  EXPECT_EQ(identity->job, "team-a/fmnist");
  EXPECT_EQ(identity->trial, "12");
  EXPECT_EQ(identity->task, "chief-0");

  env["KUBETRAIN_NAMESPACE"] = "";
  ASSERT_TRUE(MetricsReporter::Identity::FromEnvironment(getenv).ok());
  EXPECT_EQ(MetricsReporter::Identity::FromEnvironment(getenv)->job, "default/fmnist");

  for (const char* bad_index : {"x", "-1", ""}) {
    env["KUBETRAIN_TASK_INDEX"] = bad_index;
    absl::Status s = MetricsReporter::Identity::FromEnvironment(getenv).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << bad_index;
    EXPECT_THAT(s.message(), HasSubstr("KUBETRAIN_TASK_INDEX")) << bad_index;
  }
  env["KUBETRAIN_TASK_INDEX"] = "1";
  for (const char* name : {"KUBETRAIN_NAMESPACE", "KUBETRAIN_JOB_NAME", "KUBETRAIN_TRIAL_ID",
                           "KUBETRAIN_TASK_TYPE", "KUBETRAIN_TASK_INDEX"}) {
    std::string saved = env[name];
    env.erase(name);
    absl::Status s = MetricsReporter::Identity::FromEnvironment(getenv).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << name;
    EXPECT_THAT(s.message(), HasSubstr(name));
    env[name] = saved;
  }
}

QueuedMetricsReporter::Options QueueOptions(std::vector<absl::Status>* lost) {
  QueuedMetricsReporter::Options options;
  options.retry.initial_backoff = milliseconds(10);
  options.retry.max_backoff = milliseconds(50);
  options.on_lost = [lost](const absl::Status& s) { lost->push_back(s); };
  return options;
}

constexpr milliseconds kFlushTimeout = std::chrono::seconds(60);

TEST_F(MetricsReporterTest, QueueSendsEveryReportInOrder) {
  std::vector<absl::Status> lost;
  QueuedMetricsReporter queue(Reporter(token_), QueueOptions(&lost));
  EXPECT_TRUE(queue.Flush(kFlushTimeout).ok());  // nothing queued yet
  for (int step = 1; step <= 5; ++step) queue.Enqueue(step * 10, {{"accuracy", step / 10.0}});
  ASSERT_TRUE(queue.Flush(kFlushTimeout).ok());
  EXPECT_THAT(sink_.steps(), ElementsAre(10, 20, 30, 40, 50));
  EXPECT_EQ(queue.stats().delivered, 5);
  EXPECT_TRUE(lost.empty());
}

TEST_F(MetricsReporterTest, QueueDropsTheOldestWaitingReportsNeverTheNewest) {
  std::vector<absl::Status> lost;
  QueuedMetricsReporter::Options options = QueueOptions(&lost);
  options.max_pending = 3;
  sink_.Hold();
  QueuedMetricsReporter queue(Reporter(token_), options);
  queue.Enqueue(1, {{"accuracy", 0.1}});
  sink_.entered().WaitForNotification();  // step 1 is in flight, held
  for (int step = 2; step <= 10; ++step) queue.Enqueue(step, {{"accuracy", 0.1}});
  sink_.Release();
  ASSERT_TRUE(queue.Flush(kFlushTimeout).ok());
  EXPECT_THAT(sink_.steps(), ElementsAre(1, 8, 9, 10));
  ASSERT_EQ(lost.size(), 6u);
  EXPECT_EQ(lost[0].code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(lost[0].message(), HasSubstr("step 2"));
  EXPECT_EQ(queue.stats().lost, 6);
}

// After step 1 failed for good with step 2 queued behind it: step 2 arrives,
// and step 1 is told of as lost, once.
void ExpectStepOneLostAndStepTwoDelivered(QueuedMetricsReporter& queue, GatedSink& sink,
                                          const std::vector<absl::Status>& lost) {
  ASSERT_TRUE(queue.Flush(kFlushTimeout).ok());
  EXPECT_THAT(sink.steps(), ElementsAre(2));
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(lost[0].message(), HasSubstr("step 1"));
}

TEST_F(MetricsReporterTest, FlushGivesUpAnOlderFailingReportForTheLastOne) {
  std::vector<absl::Status> lost;
  sink_.FailStep(1);  // step 1 answers UNAVAILABLE for ever
  QueuedMetricsReporter queue(Reporter(token_), QueueOptions(&lost));
  queue.Enqueue(1, {{"accuracy", 0.1}});
  queue.Enqueue(2, {{"accuracy", 0.2}});
  ExpectStepOneLostAndStepTwoDelivered(queue, sink_, lost);
}

TEST_F(MetricsReporterTest, AReportGivenUpWithNothingNewerQueuedIsToldOf) {
  // Step 1 fails for ever and runs out of retries before anything newer is
  // queued or anyone flushes: it must not vanish silently.
  std::vector<absl::Status> lost;
  absl::Notification told;
  QueuedMetricsReporter::Options options = QueueOptions(&lost);
  options.retry.deadline = milliseconds(200);
  options.on_lost = [&](const absl::Status& s) {
    lost.push_back(s);
    told.Notify();
  };
  sink_.FailStep(1);
  QueuedMetricsReporter queue(Reporter(token_), options);
  queue.Enqueue(1, {{"accuracy", 0.1}});
  ASSERT_TRUE(told.WaitForNotificationWithTimeout(absl::Seconds(60)));
  queue.Enqueue(2, {{"accuracy", 0.2}});
  ExpectStepOneLostAndStepTwoDelivered(queue, sink_, lost);
}

TEST_F(MetricsReporterTest, QueueStopsSendingOnceTheTokenIsRefused) {
  std::vector<absl::Status> lost;
  QueuedMetricsReporter queue(Reporter("not-the-token"), QueueOptions(&lost));
  queue.Enqueue(1, {{"accuracy", 0.1}});
  absl::Status s = queue.Flush(kFlushTimeout);
  EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(queue.permanent_error().code(), absl::StatusCode::kPermissionDenied);
  queue.Enqueue(2, {{"accuracy", 0.2}});
  EXPECT_EQ(queue.Flush(kFlushTimeout).code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(authority_.calls(), 1);
  EXPECT_TRUE(sink_.reports().empty());
}

TEST_F(MetricsReporterTest, FlushTimesOutNamingTheAddressAndTheLastError) {
  const std::string address = address_;
  Stop();  // connection refused from now on
  std::vector<absl::Status> lost;
  auto queue = std::make_unique<QueuedMetricsReporter>(Reporter(token_), QueueOptions(&lost));
  queue->Enqueue(7, {{"accuracy", 0.1}});
  absl::Status s = queue->Flush(milliseconds(300));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(s.message(), HasSubstr(address));
  EXPECT_THAT(s.message(), HasSubstr("step 7"));
  EXPECT_THAT(s.message(), HasSubstr("last error: metrics report to " + address));
  queue.reset();  // cancels the retries in flight; returns without their deadline
}

}  // namespace
}  // namespace kubetrain::metrics
