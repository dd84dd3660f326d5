#include "common/observability/metrics_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/observability/http_get.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "operator/observability/operator_metrics.h"
#include "prometheus/registry.h"

namespace kubetrain::observability {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Sends `request` as is and returns everything the server answers before it
// closes the connection ("" when the connection fails).
std::string RawExchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size())) {
    char buffer[4096];
    ssize_t n;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0)
      reply.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return reply;
}

std::unique_ptr<MetricsServer> StartOn127(
    const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  auto server = MetricsServer::Start({.address = "127.0.0.1:0"}, collectables);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(MetricsServerTest, ServesTheRegistryOnMetrics) {
  auto registry = std::make_shared<prometheus::Registry>();
  OperatorMetrics metrics(*registry);
  metrics.ObserveReconcile("success", 0.02);
  metrics.SetLeader(true);
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  ASSERT_GT(server->port(), 0);

  auto reply = HttpGet("127.0.0.1", server->port(), "/metrics");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
  EXPECT_THAT(reply->headers["content-type"], HasSubstr("text/plain"));
  EXPECT_THAT(reply->body, HasSubstr("kubetrain_operator_reconcile_total{result=\"success\"} 1"));
  EXPECT_THAT(reply->body, HasSubstr("kubetrain_operator_leader 1"));
}

TEST(MetricsServerTest, ServesAMetricChangedAfterStart) {
  auto registry = std::make_shared<prometheus::Registry>();
  OperatorMetrics metrics(*registry);
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  metrics.SetWorkQueueDepth(7);
  auto reply = HttpGet("127.0.0.1", server->port(), "/metrics");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_THAT(reply->body, HasSubstr("kubetrain_operator_workqueue_depth 7"));
}

TEST(MetricsServerTest, ReadyzIs503UntilReadyThen200) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);

  auto before = HttpGet("127.0.0.1", server->port(), "/readyz");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->status, 503);

  server->SetReady(true);
  auto after = HttpGet("127.0.0.1", server->port(), "/readyz");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->status, 200);
  EXPECT_EQ(after->body, "ok\n");

  server->SetReady(false);
  auto again = HttpGet("127.0.0.1", server->port(), "/readyz");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->status, 503);
}

TEST(MetricsServerTest, ReadinessCheckFailureIs503WithItsReason) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  server->SetReady(true);
  server->SetReadinessCheck([] { return absl::UnavailableError("informers not synced"); });
  auto reply = HttpGet("127.0.0.1", server->port(), "/readyz");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 503);
  EXPECT_THAT(reply->body, HasSubstr("informers not synced"));
}

TEST(MetricsServerTest, HealthzIsOkByDefaultAnd500WhenTheCheckFails) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  // Liveness does not wait for readiness: a starting process is alive.
  auto ok = HttpGet("127.0.0.1", server->port(), "/healthz");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->status, 200);

  server->SetLivenessCheck([] { return absl::InternalError("worker stuck"); });
  auto failing = HttpGet("127.0.0.1", server->port(), "/healthz");
  ASSERT_TRUE(failing.ok()) << failing.status();
  EXPECT_EQ(failing->status, 500);
  EXPECT_THAT(failing->body, HasSubstr("worker stuck"));
}

TEST(MetricsServerTest, OtherPathsAre404) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  auto reply = HttpGet("127.0.0.1", server->port(), "/nothing-here");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 404);
}

TEST(MetricsServerTest, TwoServersKeepTheirOwnHealth) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto a = StartOn127({registry});
  auto b = StartOn127({registry});
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(a->port(), b->port());
  a->SetReady(true);
  auto from_a = HttpGet("127.0.0.1", a->port(), "/readyz");
  auto from_b = HttpGet("127.0.0.1", b->port(), "/readyz");
  ASSERT_TRUE(from_a.ok() && from_b.ok());
  EXPECT_EQ(from_a->status, 200);
  EXPECT_EQ(from_b->status, 503);
}

TEST(MetricsServerTest, BadAddressIsInvalidArgument) {
  auto registry = std::make_shared<prometheus::Registry>();
  EXPECT_EQ(MetricsServer::Start({.address = "localhost"}, {registry}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MetricsServer::Start({.address = "127.0.0.1:99999"}, {registry}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MetricsServerTest, PortInUseIsUnavailable) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto first = StartOn127({registry});
  ASSERT_NE(first, nullptr);
  auto second =
      MetricsServer::Start({.address = "127.0.0.1:" + std::to_string(first->port())}, {registry});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(MetricsServerTest, HeadHasNoBodyAndOtherMethodsAre405) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  const std::string head = RawExchange(server->port(), "HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200 OK\r\n"));
  EXPECT_THAT(head, HasSubstr("Content-Length: 3\r\n"));
  EXPECT_EQ(head.substr(head.find("\r\n\r\n") + 4), "");
  EXPECT_THAT(RawExchange(server->port(), "POST /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
              StartsWith("HTTP/1.1 405 "));
  EXPECT_THAT(RawExchange(server->port(), "nonsense\r\n\r\n"), StartsWith("HTTP/1.1 400 "));
  // A query string does not change the path.
  EXPECT_THAT(RawExchange(server->port(), "GET /healthz?verbose=1 HTTP/1.1\r\n\r\n"),
              StartsWith("HTTP/1.1 200 OK\r\n"));
}

TEST(MetricsServerTest, OversizedRequestIs400AndTheServerGoesOn) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  const std::string huge = "GET /metrics HTTP/1.1\r\nX-Padding: " + std::string(64 << 10, 'a');
  EXPECT_THAT(RawExchange(server->port(), huge), StartsWith("HTTP/1.1 400 "));
  auto reply = HttpGet("127.0.0.1", server->port(), "/healthz");
  ASSERT_TRUE(reply.ok()) << reply.status();
  EXPECT_EQ(reply->status, 200);
}

TEST(MetricsServerTest, StoppedServerRefusesConnections) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto server = StartOn127({registry});
  ASSERT_NE(server, nullptr);
  const int port = server->port();
  server.reset();
  EXPECT_EQ(HttpGet("127.0.0.1", port, "/healthz").status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace kubetrain::observability
