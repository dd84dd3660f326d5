// A real Prometheus (Debian's /usr/bin/prometheus) scrapes two MetricsServers,
// one holding the operator's metrics and one a runtime task's, and its HTTP
// API returns their series, then their changes.
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/observability/http_get.h"
#include "operator/observability/metrics_server.h"
#include "operator/observability/operator_metrics.h"
#include "operator/observability/runtime_metrics.h"
#include "prometheus/registry.h"
#include "tests/deploy/child_process.h"

namespace kubetrain::deploy_testing {
namespace {

using observability::HttpGet;
using observability::MetricsServer;

constexpr char kPrometheus[] = "/usr/bin/prometheus";

std::string UrlEncode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof(hex), "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

class PrometheusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPrometheus, X_OK) != 0) GTEST_SKIP() << kPrometheus << " is not installed";
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kubetrain-prom-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // The samples `query` returns now: labels -> value.
  absl::StatusOr<std::vector<std::pair<nlohmann::json, double>>> Query(int port,
                                                                       const std::string& query) {
    auto reply = HttpGet("127.0.0.1", port, "/api/v1/query?query=" + UrlEncode(query));
    if (!reply.ok()) return reply.status();
    nlohmann::json body = nlohmann::json::parse(reply->body, nullptr, false);
    if (reply->status != 200 || !body.is_object() || body.value("status", "") != "success") {
      return absl::InternalError(absl::StrCat("HTTP ", reply->status, ": ", reply->body));
    }
    std::vector<std::pair<nlohmann::json, double>> out;
    for (const auto& sample : body["data"]["result"]) {
      double value;
      if (absl::SimpleAtod(sample["value"][1].get<std::string>(), &value)) {
        out.emplace_back(sample["metric"], value);
      }
    }
    return out;
  }

  // Polls until `query` returns exactly one sample equal to `want` (from the
  // scrape job `job`), or the deadline passes.
  ::testing::AssertionResult Eventually(int port, const std::string& query, double want,
                                        const std::string& job, absl::Time deadline) {
    std::string last = "no reply";
    while (absl::Now() < deadline) {
      auto result = Query(port, query);
      if (!result.ok()) {
        last = result.status().ToString();
        absl::SleepFor(absl::Milliseconds(200));
        continue;
      }
      const auto& samples = *result;
      if (samples.size() == 1 && samples[0].second == want &&
          samples[0].first.value("job", "") == job) {
        return ::testing::AssertionSuccess();
      }
      last = absl::StrCat(samples.size(), " samples",
                          samples.empty() ? ""
                                          : absl::StrCat(", first ", samples[0].first.dump(), " = ",
                                                         samples[0].second));
      absl::SleepFor(absl::Milliseconds(200));  // between polls; the deadline bounds the wait
    }
    return ::testing::AssertionFailure()
           << query << ": want " << want << " from job " << job << ", last saw " << last;
  }

  // Prometheus's view of its scrape targets, for failure messages.
  std::string Targets(int port) {
    auto reply = HttpGet("127.0.0.1", port, "/api/v1/targets");
    return reply.ok() ? reply->body : reply.status().ToString();
  }

  std::string dir_;
};

TEST_F(PrometheusTest, ScrapesOperatorAndRuntimeMetrics) {
  auto operator_registry = std::make_shared<prometheus::Registry>();
  observability::OperatorMetrics operator_metrics(*operator_registry);
  for (int i = 0; i < 3; ++i) operator_metrics.ObserveReconcile("success", 0.01);
  operator_metrics.SetLeader(true);
  operator_metrics.SetJobsByState({{"RUNNING", 2}});

  auto runtime_registry = std::make_shared<prometheus::Registry>();
  observability::RuntimeMetrics runtime_metrics(*runtime_registry,
                                                {{"task_type", "worker"}, {"task_index", "0"}});
  runtime_metrics.ObserveStep(0.5, 256);
  runtime_metrics.ObserveCollective(observability::RuntimeMetrics::Collective::kAllReduce, 4096,
                                    0.002);

  auto operator_server = MetricsServer::Start({.address = "127.0.0.1:0"}, {operator_registry});
  ASSERT_TRUE(operator_server.ok()) << operator_server.status();
  auto runtime_server = MetricsServer::Start({.address = "127.0.0.1:0"}, {runtime_registry});
  ASSERT_TRUE(runtime_server.ok()) << runtime_server.status();

  {
    std::ofstream config(dir_ + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
           << "scrape_configs:\n"
           << "- job_name: kubetrain-operator\n  static_configs:\n  - targets: ['127.0.0.1:"
           << (*operator_server)->port() << "']\n"
           << "- job_name: kubetrain-runtime\n  static_configs:\n  - targets: ['127.0.0.1:"
           << (*runtime_server)->port() << "']\n";
  }
  ChildProcess prometheus(
      {kPrometheus, "--config.file=" + dir_ + "/prometheus.yml",
       "--storage.tsdb.path=" + dir_ + "/data", "--web.listen-address=127.0.0.1:0"},
      dir_ + "/prometheus.log");
  ASSERT_TRUE(prometheus.Start());

  std::optional<int> port;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60);
       !port && absl::Now() < deadline && !prometheus.Exited();) {
    port = ListeningPort(prometheus.pid());
    if (!port) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(port.has_value()) << "Prometheus did not listen:\n" << prometheus.Log();

  // One deadline for all the waits below: scrapes are every second.
  const absl::Time timeout = absl::Now() + absl::Seconds(90);
  EXPECT_TRUE(Eventually(*port, "up{job=\"kubetrain-operator\"}", 1, "kubetrain-operator", timeout))
      << prometheus.Log() << Targets(*port);
  EXPECT_TRUE(Eventually(*port, "up{job=\"kubetrain-runtime\"}", 1, "kubetrain-runtime", timeout))
      << Targets(*port);
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_reconcile_total{result=\"success\"}", 3,
                         "kubetrain-operator", timeout));
  EXPECT_TRUE(Eventually(*port,
                         "kubetrain_operator_reconcile_duration_seconds_count{result=\"success\"}",
                         3, "kubetrain-operator", timeout));
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_leader", 1, "kubetrain-operator", timeout));
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_jobs{state=\"RUNNING\"}", 2,
                         "kubetrain-operator", timeout));
  EXPECT_TRUE(Eventually(*port, "kubetrain_runtime_examples_per_second{task_type=\"worker\"}", 512,
                         "kubetrain-runtime", timeout));
  EXPECT_TRUE(Eventually(*port, "kubetrain_runtime_collective_bytes_total{op=\"allreduce\"}", 4096,
                         "kubetrain-runtime", timeout));

  // Later changes arrive too: the series are scraped live, not once.
  operator_metrics.ObserveReconcile("success", 0.01);
  operator_metrics.SetLeader(false);
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_reconcile_total{result=\"success\"}", 4,
                         "kubetrain-operator", timeout));
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_leader", 0, "kubetrain-operator", timeout));

  prometheus.Stop();
}

}  // namespace
}  // namespace kubetrain::deploy_testing
