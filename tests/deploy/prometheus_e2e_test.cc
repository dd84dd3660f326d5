// A real Prometheus (Debian's /usr/bin/prometheus) scrapes the real binaries:
// kubetrain-operator reconciling a job on the fake API server, and a
// kubetrain-runtime `train` task with --metrics_address. Prometheus' HTTP API
// must return the operator's and the runtime's series. Skips without
// Prometheus.
#include <stdlib.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "operator/observability/http_get.h"
#include "tests/deploy/child_process.h"
#include "tests/fake_apiserver/fake_apiserver.h"

#if !defined(KUBETRAIN_OPERATOR_BINARY) || !defined(KUBETRAIN_RUNTIME_BINARY)
#error "KUBETRAIN_OPERATOR_BINARY and KUBETRAIN_RUNTIME_BINARY must name the binaries"
#endif

namespace kubetrain::deploy_testing {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;
using observability::HttpGet;

constexpr char kPrometheus[] = "/usr/bin/prometheus";
constexpr char kToken[] = "prometheus-e2e-token";

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

// The port a child printed in its log as "<prefix>HOST:PORT"; nullopt until
// it has.
std::optional<int> PrintedPort(const ChildProcess& child, const std::string& prefix) {
  std::smatch match;
  const std::string log = child.Log();
  if (!std::regex_search(log, match, std::regex(prefix + "[^\\s:]*:([0-9]+)"))) {
    return std::nullopt;
  }
  int port;
  return absl::SimpleAtoi(match[1].str(), &port) ? std::optional<int>(port) : std::nullopt;
}

class PrometheusE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access(kPrometheus, X_OK) != 0) GTEST_SKIP() << kPrometheus << " is not installed";
    std::string pattern =
        (std::filesystem::temp_directory_path() / "kubetrain-prom-e2e-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // The samples `query` returns now: (labels, value).
  absl::StatusOr<std::vector<std::pair<json, double>>> Query(int port, const std::string& query) {
    auto reply = HttpGet("127.0.0.1", port, "/api/v1/query?query=" + UrlEncode(query));
    if (!reply.ok()) return reply.status();
    json body = json::parse(reply->body, nullptr, false);
    if (reply->status != 200 || !body.is_object() || body.value("status", "") != "success") {
      return absl::InternalError(absl::StrCat("HTTP ", reply->status, ": ", reply->body));
    }
    std::vector<std::pair<json, double>> out;
    for (const auto& sample : body["data"]["result"]) {
      double value;
      if (absl::SimpleAtod(sample["value"][1].get<std::string>(), &value)) {
        out.emplace_back(sample["metric"], value);
      }
    }
    return out;
  }

  // Polls until `query` returns at least one sample from scrape job `job`
  // for which `accept(value)` holds, or the deadline passes.
  template <typename Accept>
  ::testing::AssertionResult Eventually(int port, const std::string& query, const std::string& job,
                                        Accept accept, absl::Time deadline) {
    std::string last = "no reply";
    while (absl::Now() < deadline) {
      auto result = Query(port, query);
      if (result.ok()) {
        for (const auto& [labels, value] : *result) {
          if (labels.value("job", "") == job && accept(value)) {
            return ::testing::AssertionSuccess();
          }
        }
        last = absl::StrCat(result->size(), " samples",
                            result->empty() ? ""
                                            : absl::StrCat(", first ", (*result)[0].first.dump(),
                                                           " = ", (*result)[0].second));
      } else {
        last = result.status().ToString();
      }
      absl::SleepFor(absl::Milliseconds(200));  // between polls; the deadline bounds the wait
    }
    return ::testing::AssertionFailure() << query << " from job " << job << ": last saw " << last;
  }

  std::string Targets(int port) {
    auto reply = HttpGet("127.0.0.1", port, "/api/v1/targets");
    return reply.ok() ? reply->body : reply.status().ToString();
  }

  std::string dir_;
};

TEST_F(PrometheusE2eTest, ScrapesTheRealOperatorAndARuntimeTask) {
  // The operator, reconciling one BASIC job on the fake API server.
  FakeApiServer::Options options;
  options.bearer_token = kToken;
  auto server = FakeApiServer::Start(options);
  ASSERT_TRUE(server.ok()) << server.status();
  {
    std::ofstream out(dir_ + "/kubeconfig");
    out << "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
        << "clusters:\n- name: fake\n  cluster:\n    server: " << (*server)->url() << "\n"
        << "contexts:\n- name: fake\n  context: {cluster: fake, user: op, namespace: ns1}\n"
        << "users:\n- name: op\n  user:\n    token: " << kToken << "\n";
  }
  ChildProcess op({KUBETRAIN_OPERATOR_BINARY, "--kubeconfig", dir_ + "/kubeconfig", "--namespace",
                   "ns1", "--leader-elect=false", "--http-address=127.0.0.1:0"},
                  dir_ + "/operator.log");
  ASSERT_TRUE(op.Start());
  json job = {{"apiVersion", "kubetrain.io/v1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "scraped"}}},
              {"spec", {{"trainingInput", {{"scaleTier", "BASIC"}}}}}};
  ASSERT_TRUE((*server)->Create("trainingjobs", "ns1", job).ok());

  // A runtime task on a small two-class data set, with far more steps than
  // the test waits for: it is stopped once scraped. The classes overlap, so
  // the loss stays above zero however long it trains.
  {
    std::mt19937 rng(3);
    std::normal_distribution<double> noise(0.0, 2.0);
    std::ofstream out(dir_ + "/train.csv");
    for (int i = 0; i < 200; ++i) {
      int label = i % 2;
      out << (label ? 1.5 : -1.5) + noise(rng) << "," << noise(rng) << "," << label << "\n";
    }
  }
  ChildProcess task({KUBETRAIN_RUNTIME_BINARY, "train", "--train_data_paths=" + dir_ + "/train.csv",
                     "--eval_data_paths=" + dir_ + "/train.csv", "--output_path=" + dir_ + "/out",
                     "--max_steps=100000000", "--batch_size=20", "--hidden1=8", "--hidden2=4",
                     "--threads=1", "--seed=5", "--eval_every_secs=0.5", "--log_every_steps=100000",
                     "--metrics_address=127.0.0.1:0"},
                    dir_ + "/runtime.log");
  ASSERT_TRUE(task.Start());

  // Both print the address they bound.
  std::optional<int> op_port, task_port;
  for (const absl::Time deadline = absl::Now() + absl::Seconds(60);
       (!op_port || !task_port) && absl::Now() < deadline && !op.Exited() && !task.Exited();) {
    if (!op_port) op_port = PrintedPort(op, "serving http on ");
    if (!task_port) task_port = PrintedPort(task, "serving metrics on ");
    if (!op_port || !task_port) absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_TRUE(op_port.has_value()) << op.Log();
  ASSERT_TRUE(task_port.has_value()) << task.Log();

  {
    std::ofstream config(dir_ + "/prometheus.yml");
    config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
           << "scrape_configs:\n"
           << "- job_name: kubetrain-operator\n  static_configs:\n  - targets: ['127.0.0.1:"
           << *op_port << "']\n"
           << "- job_name: kubetrain-runtime\n  static_configs:\n  - targets: ['127.0.0.1:"
           << *task_port << "']\n";
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

  // One deadline for every wait below: scrapes are every second.
  const absl::Time deadline = absl::Now() + absl::Seconds(120);
  auto is = [](double want) { return [want](double v) { return v == want; }; };
  auto positive = [](double v) { return v > 0; };
  const std::string kOp = "kubetrain-operator", kTask = "kubetrain-runtime";
  EXPECT_TRUE(Eventually(*port, "up", kOp, is(1), deadline)) << Targets(*port) << op.Log();
  EXPECT_TRUE(Eventually(*port, "up", kTask, is(1), deadline)) << Targets(*port) << task.Log();
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_leader", kOp, is(1), deadline));
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_reconcile_total{result=\"success\"}", kOp,
                         positive, deadline));
  EXPECT_TRUE(Eventually(*port,
                         "kubetrain_operator_reconcile_duration_seconds_count{result=\"success\"}",
                         kOp, positive, deadline));
  EXPECT_TRUE(Eventually(*port, "kubetrain_operator_workqueue_wait_seconds_count", kOp, positive,
                         deadline));
  EXPECT_TRUE(Eventually(
      *port, "kubetrain_operator_api_requests_total{verb=\"create\",code=\"201\"}", kOp,
      [](double v) { return v >= 2; }, deadline));
  EXPECT_TRUE(
      Eventually(*port, "kubetrain_operator_jobs{state=\"PREPARING\"}", kOp, is(1), deadline))
      << op.Log();
  EXPECT_TRUE(Eventually(*port, "kubetrain_runtime_steps_total{task_type=\"master\"}", kTask,
                         positive, deadline))
      << task.Log();
  EXPECT_TRUE(Eventually(*port, "kubetrain_runtime_step_duration_seconds_count", kTask, positive,
                         deadline));
  EXPECT_TRUE(
      Eventually(*port, "kubetrain_runtime_examples_per_second", kTask, positive, deadline));
  EXPECT_TRUE(Eventually(*port, "kubetrain_runtime_loss", kTask, positive, deadline)) << task.Log();
  EXPECT_TRUE(Eventually(*port, "kubetrain_runtime_objective", kTask, positive, deadline));
  // The task keeps training: its step counter goes on rising in Prometheus.
  auto steps = Query(*port, "kubetrain_runtime_steps_total");
  ASSERT_TRUE(steps.ok() && !steps->empty())
      << (steps.ok() ? "no samples" : steps.status().ToString());
  const double seen = (*steps)[0].second;
  EXPECT_TRUE(Eventually(
      *port, "kubetrain_runtime_steps_total", kTask, [seen](double v) { return v > seen; },
      deadline));

  task.Stop();
  op.Stop();
  prometheus.Stop();
}

}  // namespace
}  // namespace kubetrain::deploy_testing
