#include "cli/ui/ui_server.h"

#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/observability/http_get.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace kubetrain::cli::ui {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Jobs in memory; records every call, so tests can tell what a request
// reached.
class MemorySource : public JobSource {
 public:
  struct Calls {
    int list = 0, get = 0, streams = 0, read = 0;
    std::string last_id;
    LogStream last_stream;
    int64_t last_offset = 0;
    int last_lines = 0;
  };

  MemorySource(std::map<std::string, JobRecord> jobs, Calls* calls)
      : jobs_(std::move(jobs)), calls_(calls) {}

  std::string backend() const override { return "local"; }
  std::string location() const override { return "/home/u/.kubetrain/jobs.db"; }
  std::string Warning(const std::vector<v1::TrainingJob>&, absl::Time) override { return warning; }
  absl::StatusOr<std::vector<v1::TrainingJob>> ListJobs() override {
    ++calls_->list;
    if (!list_error.ok()) return list_error;
    std::vector<v1::TrainingJob> jobs;
    for (const auto& [id, record] : jobs_) jobs.push_back(record.job);
    return jobs;
  }
  absl::StatusOr<JobRecord> GetJob(const std::string& id) override {
    ++calls_->get;
    calls_->last_id = id;
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("job [", id, "] not found"));
    return it->second;
  }
  absl::StatusOr<std::vector<LogStream>> LogStreams(const std::string& id) override {
    ++calls_->streams;
    if (!logs) return absl::UnimplementedError("no logs on this backend");
    return std::vector<LogStream>{{"1", "master-replica-0"}};
  }
  absl::StatusOr<LogChunk> ReadLog(const std::string& id, const LogStream& stream, int64_t offset,
                                   int max_lines) override {
    ++calls_->read;
    calls_->last_id = id;
    calls_->last_stream = stream;
    calls_->last_offset = offset;
    calls_->last_lines = max_lines;
    LogChunk chunk;
    chunk.lines = {{1.0, "ERROR", "bad byte \xff here"}};
    chunk.next_offset = 99;
    return chunk;
  }

  std::string warning;
  absl::Status list_error;
  bool logs = true;

 private:
  std::map<std::string, JobRecord> jobs_;
  Calls* calls_;
};

JobRecord Record(const std::string& id) {
  JobRecord record;
  record.job.mutable_metadata()->set_name(id);
  record.job.mutable_spec()->mutable_training_input()->set_scale_tier(v1::TrainingInput::BASIC);
  record.job.mutable_status()->set_state(v1::RUNNING);
  return record;
}

class UiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto source = std::make_unique<MemorySource>(
        std::map<std::string, JobRecord>{{"mnist_1", Record("mnist_1")},
                                         {"a/b <c>", Record("a/b <c>")}},
        &calls_);
    source_ = source.get();
    auto server = UiServer::Start({}, std::move(source));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  absl::StatusOr<observability::HttpResponse> Get(const std::string& path,
                                                  const std::string& host = "127.0.0.1") {
    return observability::HttpExchange(
        "127.0.0.1", server_->port(),
        absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", host, ":", server_->port(), "\r\n\r\n"));
  }

  MemorySource::Calls calls_;
  MemorySource* source_ = nullptr;
  std::unique_ptr<UiServer> server_;
};

TEST_F(UiServerTest, BindsLoopbackByDefault) {
  EXPECT_THAT(server_->url(), StartsWith("http://127.0.0.1:"));
  EXPECT_EQ(UiServer::Options().address, "127.0.0.1:0");
}

TEST_F(UiServerTest, ServesThePagesWithAStrictPolicy) {
  auto index = Get("/");
  ASSERT_TRUE(index.ok()) << index.status();
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->headers["content-type"], "text/html; charset=utf-8");
  EXPECT_THAT(index->body, HasSubstr("<script src=\"/static/app.js\""));
  const std::string csp = index->headers["content-security-policy"];
  EXPECT_THAT(csp, HasSubstr("default-src 'none'"));
  EXPECT_THAT(csp, HasSubstr("script-src 'self';"));  // no 'unsafe-inline', no other origin
  EXPECT_THAT(csp, Not(HasSubstr("unsafe")));
  EXPECT_EQ(index->headers["x-content-type-options"], "nosniff");
  EXPECT_EQ(index->headers["x-frame-options"], "DENY");
  // Nothing the page loads comes from elsewhere.
  EXPECT_THAT(index->body, Not(HasSubstr("http://")));
  EXPECT_THAT(index->body, Not(HasSubstr("https://")));

  for (const auto& [path, type] : std::vector<std::pair<std::string, std::string>>{
           {"/static/app.js", "text/javascript; charset=utf-8"},
           {"/static/charts.js", "text/javascript; charset=utf-8"},
           {"/static/style.css", "text/css; charset=utf-8"},
           {"/static/favicon.svg", "image/svg+xml"}}) {
    auto asset = Get(path);
    ASSERT_TRUE(asset.ok()) << asset.status();
    EXPECT_EQ(asset->status, 200) << path;
    EXPECT_EQ(asset->headers["content-type"], type) << path;
    EXPECT_FALSE(asset->body.empty()) << path;
    EXPECT_EQ(asset->headers["content-security-policy"], csp) << path;
  }
  // The scripts build the DOM from text only.
  EXPECT_THAT(Get("/static/app.js")->body, Not(HasSubstr("innerHTML")));
  EXPECT_THAT(Get("/static/charts.js")->body, Not(HasSubstr("innerHTML")));
  EXPECT_EQ(Get("/static/nope.js")->status, 404);
  EXPECT_EQ(Get("/static/../jobs.db")->status, 404);
  EXPECT_EQ(Get("/elsewhere")->status, 404);
}

TEST_F(UiServerTest, JobsEndpoint) {
  source_->warning = "no controller";
  auto reply = Get("/api/jobs");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->headers["content-type"], "application/json; charset=utf-8");
  const nlohmann::json body = nlohmann::json::parse(reply->body);
  EXPECT_EQ(body["backend"], "local");
  EXPECT_EQ(body["location"], "/home/u/.kubetrain/jobs.db");
  EXPECT_EQ(body["warning"], "no controller");
  EXPECT_EQ(body["jobs"].size(), 2u);

  auto filtered = Get("/api/jobs?state=succeeded");
  ASSERT_TRUE(filtered.ok());
  EXPECT_EQ(nlohmann::json::parse(filtered->body)["jobs"].size(), 0u);
  auto bad = Get("/api/jobs?state=DONE");
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ(bad->status, 400);
  EXPECT_THAT(nlohmann::json::parse(bad->body)["error"].get<std::string>(), HasSubstr("state"));

  source_->list_error = absl::UnavailableError("connection refused");
  auto down = Get("/api/jobs");
  ASSERT_TRUE(down.ok());
  EXPECT_EQ(down->status, 502);
  EXPECT_EQ(nlohmann::json::parse(down->body)["error"], "connection refused");
}

TEST_F(UiServerTest, JobEndpointDecodesTheId) {
  auto reply = Get("/api/jobs/a%2Fb%20%3Cc%3E");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200) << reply->body;
  EXPECT_EQ(calls_.last_id, "a/b <c>");
  const nlohmann::json body = nlohmann::json::parse(reply->body);
  EXPECT_EQ(body["job"]["jobId"], "a/b <c>");
  EXPECT_EQ(body["backend"], "local");

  auto missing = Get("/api/jobs/nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_EQ(nlohmann::json::parse(missing->body)["error"], "job [nope] not found");
  EXPECT_EQ(Get("/api/jobs/bad%zz")->status, 400);
  EXPECT_EQ(Get("/api/jobs/mnist_1/other")->status, 404);
  EXPECT_EQ(Get("/api/nothing")->status, 404);
}

TEST_F(UiServerTest, LogEndpoints) {
  auto streams = Get("/api/jobs/mnist_1/logs");
  ASSERT_TRUE(streams.ok());
  EXPECT_EQ(streams->status, 200);
  EXPECT_EQ(nlohmann::json::parse(streams->body)["streams"][0]["task"], "master-replica-0");

  auto chunk = Get("/api/jobs/mnist_1/log?trial=1&task=master-replica-0&offset=17&lines=5");
  ASSERT_TRUE(chunk.ok());
  EXPECT_EQ(chunk->status, 200) << chunk->body;
  EXPECT_EQ(calls_.last_stream.trial, "1");
  EXPECT_EQ(calls_.last_stream.task, "master-replica-0");
  EXPECT_EQ(calls_.last_offset, 17);
  EXPECT_EQ(calls_.last_lines, 5);
  // A byte that is not UTF-8 is replaced, the reply stays JSON.
  const nlohmann::json body = nlohmann::json::parse(chunk->body);
  EXPECT_EQ(body["nextOffset"], 99);
  EXPECT_EQ(body["lines"][0]["message"], "bad byte \xEF\xBF\xBD here");

  auto tail = Get("/api/jobs/mnist_1/log?task=master-replica-0");
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(calls_.last_offset, -1);  // the last lines
  EXPECT_EQ(calls_.last_lines, 200);

  const int reads = calls_.read;
  for (const std::string query : {"", "task=m&offset=-1", "task=m&offset=x", "task=m&lines=0",
                                  "task=m&lines=2001", "task=%zz"}) {
    auto bad = Get("/api/jobs/mnist_1/log?" + query);
    ASSERT_TRUE(bad.ok());
    EXPECT_EQ(bad->status, 400) << query;
  }
  EXPECT_EQ(calls_.read, reads);

  source_->logs = false;
  auto cluster = Get("/api/jobs/mnist_1/logs");
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(cluster->status, 501);
}

// No request can change anything: every writing method is refused before a
// handler runs, on every endpoint.
TEST_F(UiServerTest, NoEndpointWrites) {
  for (const std::string path : {"/", "/api/jobs", "/api/jobs/mnist_1", "/api/jobs/mnist_1/logs",
                                 "/api/jobs/mnist_1/log?task=master-replica-0"}) {
    for (const std::string method : {"POST", "PUT", "PATCH", "DELETE"}) {
      auto reply = observability::HttpExchange(
          "127.0.0.1", server_->port(),
          absl::StrCat(method, " ", path,
                       " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                       "Content-Length: 15\r\n\r\n{\"cancel\":true}"));
      ASSERT_TRUE(reply.ok()) << reply.status();
      EXPECT_EQ(reply->status, 405) << method << " " << path;
    }
  }
  EXPECT_EQ(calls_.list + calls_.get + calls_.streams + calls_.read, 0);
}

// A page on another site that makes the browser resolve its own name to
// 127.0.0.1 (DNS rebinding) sends its own Host: refused.
TEST_F(UiServerTest, OnlyLoopbackHostNamesAreAnswered) {
  for (const std::string host : {"127.0.0.1", "localhost", "LOCALHOST", "[::1]"}) {
    auto reply = Get("/api/jobs", host);
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->status, 200) << host;
  }
  const int lists = calls_.list;
  for (const std::string host : {"evil.example", "127.0.0.1.evil.example", "10.0.0.5"}) {
    auto reply = Get("/api/jobs", host);
    ASSERT_TRUE(reply.ok());
    EXPECT_EQ(reply->status, 403) << host;
    EXPECT_EQ(Get("/", host)->status, 403) << host;
  }
  EXPECT_EQ(calls_.list, lists);
}

TEST(UiServerStartTest, BadAddressIsAnError) {
  MemorySource::Calls calls;
  auto server =
      UiServer::Start({.address = "nowhere"},
                      std::make_unique<MemorySource>(std::map<std::string, JobRecord>{}, &calls));
  EXPECT_EQ(server.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(server.status().message(), HasSubstr("ui address 'nowhere'"));
}

TEST(PercentDecodeTest, DecodesAndRejectsMalformedEscapes) {
  EXPECT_EQ(PercentDecode("a%2Fb%20c+d", false), "a/b c+d");
  EXPECT_EQ(PercentDecode("a+b", true), "a b");
  EXPECT_EQ(PercentDecode("%3c%3E", false), "<>");
  EXPECT_EQ(PercentDecode("%", false), std::nullopt);
  EXPECT_EQ(PercentDecode("%4", false), std::nullopt);
  EXPECT_EQ(PercentDecode("%zz", false), std::nullopt);
}

}  // namespace
}  // namespace kubetrain::cli::ui
