#include "operator/kube/rest_client.h"

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "operator/kube/api_status.h"
#include "operator/observability/operator_metrics.h"
#include "prometheus/registry.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::kube {
namespace {

using fake_apiserver::FakeApiServer;
using nlohmann::json;

json Pod(const std::string& name, const std::string& job = "j1") {
  return {{"metadata", {{"name", name}, {"labels", {{"kubetrain.io/job-name", job}}}}},
          {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "x"}}})}}}};
}

class RestClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    FakeApiServer::Options options;
    options.bookmark_interval = absl::Milliseconds(50);
    options.bearer_token = "s3cret";
    auto server = FakeApiServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    ClusterConfig config;
    config.server = server_->url();
    config.bearer_token = "s3cret";
    auto client = RestClusterClient::Create(config, RestClientOptions{.qps = 0});
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<RestClusterClient> client_;
};

TEST_F(RestClientTest, CrudWithMappedErrors) {
  auto created = client_->Create(kPods, "ns1", Pod("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ((*created)["metadata"]["namespace"], "ns1");
  EXPECT_EQ(client_->Create(kPods, "ns1", Pod("a")).status().code(),
            absl::StatusCode::kAlreadyExists);

  auto got = client_->Get(kPods, "ns1", "a");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(client_->Get(kPods, "ns1", "b").status().code(), absl::StatusCode::kNotFound);

  json stale = *got;
  auto patched = client_->MergePatch(kPods, "ns1", "a", {{"status", {{"phase", "Running"}}}},
                                     /*status=*/true);
  ASSERT_TRUE(patched.ok()) << patched.status();
  EXPECT_EQ((*patched)["status"]["phase"], "Running");
  stale["metadata"]["labels"]["x"] = "y";
  absl::Status conflict = client_->Update(kPods, "ns1", stale, false).status();
  EXPECT_TRUE(IsConflict(conflict)) << conflict;
  EXPECT_NE(conflict.message().find("PUT /api/v1/namespaces/ns1/pods/a"), std::string::npos);

  EXPECT_TRUE(client_->Delete(kPods, "ns1", "a").ok());
  EXPECT_EQ(client_->Delete(kPods, "ns1", "a").code(), absl::StatusCode::kNotFound);
}

TEST_F(RestClientTest, StatusSubresourceAndList) {
  json job = {{"metadata", {{"name", "j1"}}}, {"spec", {{"x", 1}}}};
  auto created = client_->Create(kTrainingJobs, "ns1", job);
  ASSERT_TRUE(created.ok()) << created.status();
  json with_status = *created;
  with_status["status"] = {{"state", "RUNNING"}};
  auto updated = client_->Update(kTrainingJobs, "ns1", with_status, /*status=*/true);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ((*updated)["status"]["state"], "RUNNING");

  for (int i = 0; i < 3; ++i)
    ASSERT_TRUE(client_->Create(kPods, "ns1", Pod(absl::StrCat("p", i))).ok());
  ASSERT_TRUE(client_->Create(kPods, "ns1", Pod("other", "j2")).ok());
  auto list =
      client_->List(kPods, "ns1", ListOptions{.label_selector = "kubetrain.io/job-name=j1"});
  ASSERT_TRUE(list.ok());
  EXPECT_EQ((*list)["items"].size(), 3u);
  auto all = client_->List(kPods, "", ListOptions{});
  ASSERT_TRUE(all.ok());
  EXPECT_EQ((*all)["items"].size(), 4u);
}

TEST_F(RestClientTest, RejectsWrongTokenAndServerErrorsAreRetryable) {
  ClusterConfig config;
  config.server = server_->url();
  config.bearer_token = "wrong";
  auto bad = RestClusterClient::Create(config, RestClientOptions{.qps = 0});
  ASSERT_TRUE(bad.ok());
  EXPECT_EQ((*bad)->Get(kPods, "ns1", "a").status().code(), absl::StatusCode::kUnauthenticated);

  server_->FailNextRequests(1, 503);
  absl::Status unavailable = client_->Get(kPods, "ns1", "a").status();
  EXPECT_TRUE(IsRetryable(unavailable)) << unavailable;
}

TEST_F(RestClientTest, ConnectionRefusedIsUnavailable) {
  ClusterConfig config;
  config.server = server_->url();
  int port = server_->port();
  server_.reset();  // nothing listens there any more
  auto client = RestClusterClient::Create(config, RestClientOptions{.qps = 0});
  ASSERT_TRUE(client.ok());
  absl::Status status = (*client)->Get(kPods, "ns1", "a").status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status << " port " << port;
}

TEST_F(RestClientTest, RejectsBadServerAndPem) {
  ClusterConfig config;
  config.server = "ftp://example";
  EXPECT_EQ(RestClusterClient::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
  config.server = "https://127.0.0.1:1";
  config.ca_pem = "not a certificate";
  EXPECT_EQ(RestClusterClient::Create(config).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RestClientTest, WatchStreamsEventsAsTheyHappen) {
  WatchOptions options;
  options.resource_version = std::to_string(server_->CurrentResourceVersion());
  options.label_selector = "kubetrain.io/job-name=j1";
  auto watch = client_->Watch(kPods, "ns1", options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  // Each event is read before the next one is made: the stream is incremental.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client_->Create(kPods, "ns1", Pod(absl::StrCat("p", i))).ok());
    for (;;) {
      auto event = (*watch)->Next();
      ASSERT_TRUE(event.ok()) << event.status();
      ASSERT_TRUE(event->has_value());
      if ((*event)->type == "BOOKMARK") continue;
      EXPECT_EQ((*event)->type, "ADDED");
      EXPECT_EQ((*event)->object["metadata"]["name"], absl::StrCat("p", i));
      break;
    }
  }
  server_->DropWatches();
  for (;;) {
    auto event = (*watch)->Next();
    ASSERT_TRUE(event.ok()) << event.status();
    if (!event->has_value()) break;  // the end of the stream
    EXPECT_EQ((*event)->type, "BOOKMARK");
  }
}

TEST_F(RestClientTest, CancelUnblocksAWatch) {
  WatchOptions options;
  options.resource_version = std::to_string(server_->CurrentResourceVersion());
  options.allow_bookmarks = false;
  auto watch = client_->Watch(kPods, "ns1", options);
  ASSERT_TRUE(watch.ok()) << watch.status();
  WatchStream* stream = watch->get();
  std::thread canceller([stream] { stream->Cancel(); });
  auto event = stream->Next();  // blocks until cancelled: no event will come
  canceller.join();
  if (event.ok()) {
    EXPECT_FALSE(event->has_value());
  } else {
    EXPECT_EQ(event.status().code(), absl::StatusCode::kUnavailable);
  }
}

TEST_F(RestClientTest, WatchFromCompactedVersionReportsGone) {
  std::string old_rv = std::to_string(server_->CurrentResourceVersion());
  ASSERT_TRUE(client_->Create(kPods, "ns1", Pod("a")).ok());
  server_->CompactHistory();
  auto watch = client_->Watch(kPods, "ns1", WatchOptions{.resource_version = old_rv});
  ASSERT_TRUE(watch.ok());
  auto event = (*watch)->Next();
  ASSERT_TRUE(event.ok() && event->has_value());
  EXPECT_EQ((*event)->type, "ERROR");
  EXPECT_EQ((*event)->object["code"], 410);
}

}  // namespace
}  // namespace kubetrain::kube

namespace kubetrain::kube {
namespace {

// Every request lands in kubetrain_operator_api_requests_total under its RBAC
// verb and the HTTP code the server answered (0 when none came back).
TEST(RestClientMetricsTest, CountsRequestsByVerbAndCode) {
  auto server = fake_apiserver::FakeApiServer::Start();
  ASSERT_TRUE(server.ok()) << server.status();
  prometheus::Registry registry;
  observability::OperatorMetrics metrics(registry);
  ClusterConfig config;
  config.server = (*server)->url();
  RestClientOptions options{.qps = 0};
  options.on_request = [&metrics](std::string_view verb, int code) {
    metrics.CountApiRequest(verb, code);
  };
  auto client = RestClusterClient::Create(config, options);
  ASSERT_TRUE(client.ok()) << client.status();
  RestClusterClient& c = **client;
  ASSERT_TRUE(c.Create(kPods, "ns1", Pod("a")).ok());
  EXPECT_FALSE(c.Create(kPods, "ns1", Pod("a")).ok());  // 409
  ASSERT_TRUE(c.Get(kPods, "ns1", "a").ok());
  EXPECT_FALSE(c.Get(kPods, "ns1", "missing").ok());  // 404
  ASSERT_TRUE(c.List(kPods, "ns1", ListOptions{}).ok());
  ASSERT_TRUE(c.Delete(kPods, "ns1", "a").ok());
  auto watch = c.Watch(kPods, "ns1", WatchOptions{});
  ASSERT_TRUE(watch.ok()) << watch.status();
  (*watch)->Cancel();

  std::map<std::string, double> counts;
  for (const auto& family : registry.Collect()) {
    if (family.name != "kubetrain_operator_api_requests_total") continue;
    for (const auto& metric : family.metric) {
      std::string key;
      for (const auto& label : metric.label) key += label.name + "=" + label.value + " ";
      counts[key] = metric.counter.value;
    }
  }
  std::map<std::string, double> want = {{"code=201 verb=create ", 1}, {"code=409 verb=create ", 1},
                                        {"code=200 verb=get ", 1},    {"code=404 verb=get ", 1},
                                        {"code=200 verb=list ", 1},   {"code=200 verb=delete ", 1},
                                        {"code=200 verb=watch ", 1}};
  EXPECT_EQ(counts, want);
}

}  // namespace
}  // namespace kubetrain::kube

namespace kubetrain::kube {
namespace {

TEST_F(RestClientTest, StreamLogFollowsAndMapsErrors) {
  ASSERT_TRUE(client_->Create(kPods, "ns1", Pod("a")).ok());
  // Not started yet: the API server's 400, as the caller retries later.
  auto waiting = client_->StreamLog("ns1", "a", LogOptions{.container = "c"});
  EXPECT_EQ(waiting.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(waiting.status().message().find("is waiting to start"), std::string::npos);
  EXPECT_EQ(client_->StreamLog("ns1", "gone", LogOptions{}).status().code(),
            absl::StatusCode::kNotFound);

  ASSERT_TRUE(server_->StartContainer("ns1", "a", "c").ok());
  ASSERT_TRUE(server_->AppendLog("ns1", "a", "c", "one\n\nthree").ok());
  auto stream = client_->StreamLog("ns1", "a", LogOptions{.follow = true});
  ASSERT_TRUE(stream.ok()) << stream.status();
  for (const char* expected : {"one", "", "three"}) {  // an empty line is a line
    auto line = (*stream)->NextLine();
    ASSERT_TRUE(line.ok()) << line.status();
    EXPECT_EQ(*line, std::optional<std::string>(expected));
  }
  // Cancel ends a read that waits for more (or, if it comes first, the next).
  std::thread cancel([&] { (*stream)->Cancel(); });
  auto end = (*stream)->NextLine();
  cancel.join();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(*end, std::nullopt);
  EXPECT_EQ(server_->RequestCounts()["get pods/log"], 3);
}

}  // namespace
}  // namespace kubetrain::kube
