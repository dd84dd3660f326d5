#include "common/observability/metrics_server.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "prometheus/text_serializer.h"

namespace kubetrain::observability {

struct MetricsServer::Health {
  absl::Mutex mu;
  bool ready ABSL_GUARDED_BY(mu) = false;
  std::function<absl::Status()> liveness ABSL_GUARDED_BY(mu);
  std::function<absl::Status()> readiness ABSL_GUARDED_BY(mu);
};

namespace {

HttpReply PlainReply(int status, std::string body) {
  HttpReply reply;
  reply.status = status;
  reply.body = std::move(body);
  return reply;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const Options& options,
    const std::vector<std::weak_ptr<prometheus::Collectable>>& collectables) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->collectables_ = collectables;
  server->health_ = std::make_unique<Health>();
  absl::StatusOr<std::unique_ptr<HttpServer>> http = HttpServer::Start(
      {.address = options.address, .threads = options.threads, .name = "metrics"},
      [s = server.get()](const HttpRequest& request) { return s->Serve(request); });
  if (!http.ok()) return http.status();
  server->server_ = *std::move(http);
  return server;
}

MetricsServer::~MetricsServer() = default;

HttpReply MetricsServer::Serve(const HttpRequest& request) {
  if (request.path == "/metrics") {
    std::vector<prometheus::MetricFamily> families;
    for (const auto& weak : collectables_) {
      if (std::shared_ptr<prometheus::Collectable> collectable = weak.lock()) {
        std::vector<prometheus::MetricFamily> collected = collectable->Collect();
        families.insert(families.end(), std::make_move_iterator(collected.begin()),
                        std::make_move_iterator(collected.end()));
      }
    }
    HttpReply reply;
    reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    reply.body = prometheus::TextSerializer().Serialize(families);
    return reply;
  }
  const bool live = request.path == "/healthz" || request.path == "/livez";
  if (!live && request.path != "/readyz") return PlainReply(404, "not found\n");
  bool ready;
  std::function<absl::Status()> check;
  {
    absl::MutexLock lock(&health_->mu);
    ready = health_->ready;
    check = live ? health_->liveness : health_->readiness;
  }
  if (!live && !ready) return PlainReply(503, "not ready\n");
  const absl::Status status = check ? check() : absl::OkStatus();
  if (!status.ok()) return PlainReply(live ? 500 : 503, absl::StrCat(status.ToString(), "\n"));
  return PlainReply(200, "ok\n");
}

void MetricsServer::SetReady(bool ready) {
  absl::MutexLock lock(&health_->mu);
  health_->ready = ready;
}

void MetricsServer::SetLivenessCheck(std::function<absl::Status()> check) {
  absl::MutexLock lock(&health_->mu);
  health_->liveness = std::move(check);
}

void MetricsServer::SetReadinessCheck(std::function<absl::Status()> check) {
  absl::MutexLock lock(&health_->mu);
  health_->readiness = std::move(check);
}

}  // namespace kubetrain::observability
