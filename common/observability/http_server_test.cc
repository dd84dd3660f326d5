#include "common/observability/http_server.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/observability/http_get.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace kubetrain::observability {
namespace {

using ::testing::HasSubstr;

// A handler that records what it was given and answers with it.
struct Recorder {
  absl::Mutex mu;
  std::vector<HttpRequest> seen ABSL_GUARDED_BY(mu);

  HttpServer::Handler Handler() {
    return [this](const HttpRequest& request) {
      absl::MutexLock lock(&mu);
      seen.push_back(request);
      HttpReply reply;
      reply.content_type = "application/json";
      reply.body = "{\"path\":\"" + request.path + "\"}";
      reply.headers.emplace_back("X-Test", "yes");
      if (request.path == "/cached") reply.headers.emplace_back("Cache-Control", "max-age=60");
      return reply;
    };
  }
  size_t count() {
    absl::MutexLock lock(&mu);
    return seen.size();
  }
  HttpRequest last() {
    absl::MutexLock lock(&mu);
    return seen.back();
  }
};

std::unique_ptr<HttpServer> StartOn127(Recorder& recorder) {
  auto server = HttpServer::Start({.address = "127.0.0.1:0", .name = "test"}, recorder.Handler());
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(HttpServerTest, HandlerSeesPathQueryAndHeaders) {
  Recorder recorder;
  auto server = StartOn127(recorder);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->host(), "127.0.0.1");
  auto reply = HttpExchange("127.0.0.1", server->port(),
                            "GET /api/jobs/a%20b?state=RUNNING&x=1 HTTP/1.1\r\n"
                            "Host: 127.0.0.1:1\r\nX-Mixed-Case:  padded value \r\n\r\n");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->body, "{\"path\":\"/api/jobs/a%20b\"}");
  EXPECT_EQ(reply->headers["content-type"], "application/json");
  EXPECT_EQ(reply->headers["x-test"], "yes");
  EXPECT_EQ(reply->headers["cache-control"], "no-store");
  EXPECT_EQ(reply->headers["connection"], "close");
  const HttpRequest seen = recorder.last();
  EXPECT_EQ(seen.method, "GET");
  EXPECT_EQ(seen.path, "/api/jobs/a%20b");
  EXPECT_EQ(seen.query, "state=RUNNING&x=1");
  EXPECT_EQ(seen.headers.at("host"), "127.0.0.1:1");
  EXPECT_EQ(seen.headers.at("x-mixed-case"), "padded value");
}

TEST(HttpServerTest, HandlerMayChooseItsOwnCacheControl) {
  Recorder recorder;
  auto server = StartOn127(recorder);
  ASSERT_NE(server, nullptr);
  auto reply = HttpGet("127.0.0.1", server->port(), "/cached");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->headers["cache-control"], "max-age=60");
}

TEST(HttpServerTest, HeadGetsTheHeadersOfGetWithoutTheBody) {
  Recorder recorder;
  auto server = StartOn127(recorder);
  ASSERT_NE(server, nullptr);
  auto reply = HttpExchange("127.0.0.1", server->port(), "HEAD /x HTTP/1.1\r\nHost: h\r\n\r\n");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_EQ(reply->headers["content-length"],
            std::to_string(std::string("{\"path\":\"/x\"}").size()));
  EXPECT_EQ(reply->body, "");
}

// No method that could write reaches a handler.
TEST(HttpServerTest, WritingMethodsAre405WithoutReachingTheHandler) {
  Recorder recorder;
  auto server = StartOn127(recorder);
  ASSERT_NE(server, nullptr);
  for (const std::string method :
       {"POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}) {
    auto reply =
        HttpExchange("127.0.0.1", server->port(),
                     method + " /api/jobs HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}");
    ASSERT_TRUE(reply.ok()) << method << ": " << reply.status();
    EXPECT_EQ(reply->status, 405) << method;
    EXPECT_EQ(reply->headers["allow"], "GET, HEAD") << method;
  }
  EXPECT_EQ(recorder.count(), 0u);
}

TEST(HttpServerTest, MalformedRequestsAre400) {
  Recorder recorder;
  auto server = StartOn127(recorder);
  ASSERT_NE(server, nullptr);
  for (const std::string request : {"nonsense\r\n\r\n", "GET /x HTTP/1.1\r\nno colon here\r\n\r\n",
                                    "GET /x HTTP/1.1\r\n: empty name\r\n\r\n"}) {
    auto reply = HttpExchange("127.0.0.1", server->port(), request);
    ASSERT_TRUE(reply.ok()) << reply.status();
    EXPECT_EQ(reply->status, 400) << request;
  }
  EXPECT_EQ(recorder.count(), 0u);
}

TEST(HttpServerTest, AddressErrorsNameTheServer) {
  Recorder recorder;
  auto bad = HttpServer::Start({.address = "localhost", .name = "ui"}, recorder.Handler());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("ui address 'localhost'"));
  auto first = StartOn127(recorder);
  ASSERT_NE(first, nullptr);
  auto taken = HttpServer::Start(
      {.address = "127.0.0.1:" + std::to_string(first->port()), .name = "ui"}, recorder.Handler());
  EXPECT_EQ(taken.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(taken.status().message(), HasSubstr("ui server on '127.0.0.1:"));
}

TEST(HttpServerTest, ConcurrentRequestsAllAnswered) {
  Recorder recorder;
  auto server = HttpServer::Start({.address = "127.0.0.1:0", .threads = 3}, recorder.Handler());
  ASSERT_TRUE(server.ok()) << server.status();
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&, i] {
      auto reply = HttpGet("127.0.0.1", (*server)->port(), "/c" + std::to_string(i));
      if (reply.ok() && reply->body == "{\"path\":\"/c" + std::to_string(i) + "\"}") ++ok;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(ok.load(), 8);
}

}  // namespace
}  // namespace kubetrain::observability
