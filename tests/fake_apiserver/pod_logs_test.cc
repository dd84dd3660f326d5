// pods/log on the fake API server, read with a real HTTP client (cpprestsdk),
// as `kubetrain jobs stream-logs` reads it.
#define _TURN_OFF_PLATFORM_STRING  // cpprest's U() macro breaks gtest
#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fake_apiserver/fake_apiserver.h"

namespace kubetrain::fake_apiserver {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
namespace http = web::http;

constexpr char kLogPath[] = "/api/v1/namespaces/ns1/pods/p1/log";

// A streamed answer, read one line at a time as it arrives.
class LogReader {
 public:
  explicit LogReader(http::http_response response) : response_(std::move(response)) {}
  int code() const { return response_.status_code(); }
  // The next line without its newline; nullopt at the end of the answer.
  std::optional<std::string> Next() {
    concurrency::streams::container_buffer<std::string> line;
    response_.body().read_line(line).get();
    if (line.collection().empty() && response_.body().is_eof()) return std::nullopt;
    return line.collection();
  }
  std::vector<std::string> Rest() {
    std::vector<std::string> lines;
    while (std::optional<std::string> line = Next()) lines.push_back(*line);
    return lines;
  }
  json Error() { return json::parse(response_.extract_utf8string(true).get()); }

 private:
  http::http_response response_;
};

class PodLogsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = FakeApiServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = std::make_unique<http::client::http_client>(server_->url());
    ASSERT_TRUE(server_->Create("pods", "ns1", Pod("p1", {"kubetrain"})).ok());
  }

  static json Pod(const std::string& name, const std::vector<std::string>& containers) {
    json list = json::array();
    for (const std::string& c : containers) list.push_back({{"name", c}, {"image", "x"}});
    return {{"metadata", {{"name", name}}}, {"spec", {{"containers", list}}}};
  }

  LogReader Get(const std::string& query, const std::string& path = kLogPath) {
    http::http_request req(http::methods::GET);
    req.set_request_uri(path + query);
    return LogReader(client_->request(req).get());
  }

  std::unique_ptr<FakeApiServer> server_;
  std::unique_ptr<http::client::http_client> client_;
};

TEST_F(PodLogsTest, AnswersAsTheApiServerBeforeAContainerHasALog) {
  LogReader r = Get("");
  EXPECT_EQ(r.code(), 400);
  EXPECT_EQ(r.Error()["message"],
            "container \"kubetrain\" in pod \"p1\" is waiting to start - no logs yet");
  ASSERT_TRUE(server_
                  ->MergePatch("pods", "ns1", "p1",
                               {{"status",
                                 {{"containerStatuses",
                                   {{{"name", "kubetrain"},
                                     {"state", {{"waiting", {{"reason", "ErrImagePull"}}}}}}}}}}},
                               "status")
                  .ok());
  EXPECT_EQ(Get("").Error()["message"],
            "container \"kubetrain\" in pod \"p1\" is waiting to start: image can't be pulled");
  r = Get("", "/api/v1/namespaces/ns1/pods/nope/log");
  EXPECT_EQ(r.code(), 404);
  EXPECT_EQ(r.Error()["reason"], "NotFound");
  EXPECT_EQ(Get("?container=sidecar").Error()["message"],
            "container sidecar is not valid for pod p1");
  EXPECT_EQ(Get("?tailLines=10").Error()["message"],
            "tailLines is not implemented by the fake API server");
  EXPECT_EQ(Get("?sinceSeconds=5&sinceTime=2027-01-01T00:00:00Z").code(), 400);

  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("p2", {"a", "b"})).ok());
  EXPECT_EQ(Get("", "/api/v1/namespaces/ns1/pods/p2/log").Error()["message"],
            "a container name must be specified for pod p2, choose one of: [a b]");
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  EXPECT_EQ(Get("?previous=true").Error()["message"],
            "previous terminated container \"kubetrain\" in pod \"p1\" not found");
  EXPECT_EQ(server_->RequestCounts()["get pods/log"], 8);
}

TEST_F(PodLogsTest, WithoutFollowTheLinesSoFarWithTimestampsAndSince) {
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "step 1\nstep 2\n").ok());
  LogReader r = Get("?container=kubetrain");
  ASSERT_EQ(r.code(), 200);
  EXPECT_THAT(r.Rest(), ElementsAre("step 1", "step 2"));

  std::vector<std::string> stamped = Get("?timestamps=true").Rest();
  ASSERT_EQ(stamped.size(), 2u);
  std::vector<absl::Time> times;
  for (const std::string& line : stamped) {
    std::vector<std::string> parts = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    ASSERT_EQ(parts.size(), 2u) << line;
    absl::Time t;
    std::string error;
    ASSERT_TRUE(absl::ParseTime(absl::RFC3339_full, parts[0], &t, &error)) << line << error;
    EXPECT_LT(absl::AbsDuration(absl::Now() - t), absl::Minutes(1));
    times.push_back(t);
  }
  EXPECT_LT(times[0], times[1]);  // strictly increasing stamps
  EXPECT_THAT(stamped[1], ::testing::EndsWith(" step 2"));
  // sinceTime keeps the lines stamped at or after it.
  const std::string since =
      absl::FormatTime("%Y-%m-%d%ET%H:%M:%E*SZ", times[1], absl::UTCTimeZone());
  EXPECT_THAT(Get("?sinceTime=" + web::uri::encode_data_string(since)).Rest(),
              ElementsAre("step 2"));
}

TEST_F(PodLogsTest, FollowStreamsAGrowingLogUntilTheContainerStops) {
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "first").ok());
  LogReader r = Get("?follow=true");
  ASSERT_EQ(r.code(), 200);
  EXPECT_EQ(r.Next(), "first");
  // Each line arrives as it is written, while the answer stays open.
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", absl::StrCat("line ", i)).ok());
    EXPECT_EQ(r.Next(), absl::StrCat("line ", i));
  }
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "last").ok());
  ASSERT_TRUE(server_->StopContainer("ns1", "p1", "kubetrain").ok());
  EXPECT_THAT(r.Rest(), ElementsAre("last"));
  // A stopped container's log is still there, and a follow of it ends at once.
  EXPECT_THAT(Get("?follow=true").Rest(),
              ElementsAre("first", "line 0", "line 1", "line 2", "last"));
}

TEST_F(PodLogsTest, ARestartEndsTheStreamAndStartsAnEmptyLog) {
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "run 1").ok());
  LogReader r = Get("?follow=true");
  EXPECT_EQ(r.Next(), "run 1");
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());  // crashed, restarted
  EXPECT_EQ(r.Next(), std::nullopt);
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "run 2").ok());
  EXPECT_THAT(Get("").Rest(), ElementsAre("run 2"));
  EXPECT_THAT(Get("?previous=true&follow=true").Rest(), ElementsAre("run 1"));
  // Only the last terminated run is kept, as on a node.
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  EXPECT_THAT(Get("?previous=true").Rest(), ElementsAre("run 2"));
  EXPECT_THAT(Get("").Rest(), ElementsAre());
}

TEST_F(PodLogsTest, DeletingThePodEndsItsStreamsAndItsLogs) {
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "hello").ok());
  LogReader r = Get("?follow=true");
  EXPECT_EQ(r.Next(), "hello");
  ASSERT_TRUE(server_->Delete("pods", "ns1", "p1").ok());
  EXPECT_EQ(r.Next(), std::nullopt);
  EXPECT_EQ(Get("").code(), 404);
  // A new pod of the same name starts with no log.
  ASSERT_TRUE(server_->Create("pods", "ns1", Pod("p1", {"kubetrain"})).ok());
  EXPECT_THAT(Get("").Error()["message"].get<std::string>(), HasSubstr("is waiting to start"));
}

TEST_F(PodLogsTest, ADroppedStreamResumesFromSinceTime) {
  ASSERT_TRUE(server_->StartContainer("ns1", "p1", "kubetrain").ok());
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "a\nb").ok());
  LogReader r = Get("?follow=true&timestamps=true");
  std::optional<std::string> a = r.Next(), b = r.Next();
  ASSERT_TRUE(a && b);
  server_->DropLogStreams();
  EXPECT_EQ(r.Next(), std::nullopt);
  ASSERT_TRUE(server_->AppendLog("ns1", "p1", "kubetrain", "c").ok());
  const std::string last_stamp = b->substr(0, b->find(' '));
  LogReader resumed = Get("?follow=true&sinceTime=" + web::uri::encode_data_string(last_stamp));
  EXPECT_EQ(resumed.Next(), "b");  // at or after: the client drops what it has seen
  EXPECT_EQ(resumed.Next(), "c");
  ASSERT_TRUE(server_->StopContainer("ns1", "p1", "kubetrain").ok());
  EXPECT_EQ(resumed.Next(), std::nullopt);
}

}  // namespace
}  // namespace kubetrain::fake_apiserver
