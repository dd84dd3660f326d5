#include "tests/deploy/prometheus_server.h"

#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/observability/http_get.h"
#include "common/testing/wait_until.h"

namespace kubetrain::deploy_testing {
namespace {

using nlohmann::json;
using observability::HttpGet;

// Percent-encodes everything but RFC 3986's unreserved characters, so that a
// PromQL expression (braces, quotes, commas) survives as one query parameter.
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

std::string Describe(const std::vector<PrometheusServer::Sample>& samples) {
  std::string out = absl::StrCat(samples.size(), " samples");
  for (const auto& sample : samples) {
    absl::StrAppend(&out, samples.size() == 1 ? ": " : "; ", sample.labels.dump(), " = ",
                    sample.value);
  }
  return out;
}

}  // namespace

bool PrometheusServer::Installed() { return access(kBinary, X_OK) == 0; }

PrometheusServer::PrometheusServer(const std::string& dir)
    : process_({kBinary, "--config.file=" + dir + "/prometheus.yml",
                "--storage.tsdb.path=" + dir + "/data", "--web.listen-address=127.0.0.1:0"},
               dir + "/prometheus.log") {}

absl::StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(
    const std::string& dir, const std::vector<ScrapeTarget>& targets) {
  const std::string config_path = dir + "/prometheus.yml";
  {
    std::ofstream config(config_path);
    config << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
           << "scrape_configs:\n";
    for (const ScrapeTarget& target : targets) {
      config << "- job_name: " << target.job
             << "\n  static_configs:\n  - targets: ['127.0.0.1:" << target.port << "']\n";
    }
    if (!config.flush()) return absl::InternalError(absl::StrCat("cannot write ", config_path));
  }
  // Not make_unique: the constructor is private.
  std::unique_ptr<PrometheusServer> server(new PrometheusServer(dir));
  if (!server->process_.Start().ok()) {
    return absl::InternalError(absl::StrCat("cannot run ", kBinary, " (log in ", dir, ")"));
  }
  // Started on port 0, it logs the address it bound in no stable format:
  // /proc tells which port it listens on.
  std::optional<int> port;
  test_support::WaitUntil(
      [&] {
        if (server->process_.Exited()) return true;
        port = test_support::ListeningPort(server->process_.pid());
        return port.has_value();
      },
      absl::Seconds(60), absl::Milliseconds(50));
  if (!port) {
    return absl::UnavailableError(
        absl::StrCat("Prometheus did not listen; ", dir, "/prometheus.log:\n", server->Log()));
  }
  server->port_ = *port;
  return server;
}

absl::StatusOr<std::vector<PrometheusServer::Sample>> PrometheusServer::Query(
    const std::string& promql) const {
  auto reply = HttpGet("127.0.0.1", port_, "/api/v1/query?query=" + UrlEncode(promql));
  if (!reply.ok()) return reply.status();
  const json body = json::parse(reply->body, nullptr, false);
  if (reply->status != 200 || !body.is_object() || !body.contains("status") ||
      body["status"] != "success") {
    return absl::InternalError(
        absl::StrCat("query ", promql, ": HTTP ", reply->status, ": ", reply->body));
  }
  const auto data = body.find("data");
  if (data == body.end() || !data->is_object() || !data->contains("result") ||
      !(*data)["result"].is_array()) {
    return absl::InternalError(absl::StrCat("query ", promql, ": no result in ", reply->body));
  }
  std::vector<Sample> samples;
  for (const json& sample : (*data)["result"]) {
    // A vector sample is {"metric": {labels}, "value": [time, "value"]}.
    const auto value = sample.find("value");
    if (value == sample.end() || !value->is_array() || value->size() != 2 ||
        !(*value)[1].is_string()) {
      continue;
    }
    double parsed;
    if (absl::SimpleAtod((*value)[1].get<std::string>(), &parsed)) {
      samples.push_back({sample.value("metric", json::object()), parsed});
    }
  }
  return samples;
}

std::string PrometheusServer::Targets() const {
  auto reply = HttpGet("127.0.0.1", port_, "/api/v1/targets");
  return reply.ok() ? reply->body : reply.status().ToString();
}

absl::Status WaitForSamples(
    const PrometheusServer& server, const std::string& promql,
    const std::function<bool(const std::vector<PrometheusServer::Sample>&)>& accept,
    absl::Time deadline) {
  std::string last = "no reply";
  while (absl::Now() < deadline) {
    auto samples = server.Query(promql);
    if (samples.ok()) {
      if (accept(*samples)) return absl::OkStatus();
      last = Describe(*samples);
    } else {
      last = samples.status().ToString();
    }
    absl::SleepFor(absl::Milliseconds(200));  // between polls; the deadline bounds the wait
  }
  return absl::DeadlineExceededError(absl::StrCat(promql, ": last saw ", last));
}

}  // namespace kubetrain::deploy_testing
