#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "operator/kube/cluster_client.h"
#include "operator/kube/kubeconfig.h"

namespace kubetrain::kube {

struct RestClientOptions {
  double qps = 50;  // client-side limit on requests per second (<= 0: none)
  int burst = 100;
  absl::Duration request_timeout = absl::Seconds(30);
  // Server-side timeout asked for on watches; the client gives up on a silent
  // watch connection a little after it.
  int watch_timeout_seconds = 300;
  std::string user_agent = "kubetrain-operator";
  // Called after every request with its RBAC verb and HTTP code (0: no
  // answer), e.g. to count requests (OperatorMetrics::CountApiRequest); empty:
  // nothing is called. Called on the requesting threads, so it must be
  // thread-safe; what it captures must outlive the client. A callback rather
  // than the operator's metrics class, so that the client links no
  // prometheus-cpp.
  std::function<void(std::string_view verb, int code)> on_request = nullptr;
};

// Sizes the one thread pool on which every cpprestsdk client of this process
// does its I/O and runs its continuations. cpprestsdk's default is 40
// threads; on a machine of a few cores they spend more time handing work to
// each other (futex to futex) than doing it: bench/operator_scale measures
// it. Call before the first client is made; false when the pool exists
// already (it then stays as it is).
bool SetClientIoThreads(size_t threads);

// ClusterClient over the Kubernetes REST API, on cpprestsdk's http_client.
// TLS: the CA bundle, client certificate and key of `config` are installed
// through the http_client's SSL context callback; insecure-skip-tls-verify
// turns verification off. Watches and logs stream: each event (log line) is
// read as the line it is, as it arrives, and Cancel() closes the
// connection. No retries inside: callers (informers, the work queue) retry
// with backoff. cpprest exceptions are caught here and come back as
// Unavailable. Thread-safe.
class RestClusterClient : public ClusterClient {
 public:
  // InvalidArgument when the server URL or PEM material is unusable.
  static absl::StatusOr<std::unique_ptr<RestClusterClient>> Create(
      const ClusterConfig& config, const RestClientOptions& options = RestClientOptions());
  ~RestClusterClient() override;

  absl::StatusOr<nlohmann::json> Get(const Resource& resource, const std::string& ns,
                                     const std::string& name) override;
  absl::StatusOr<nlohmann::json> List(const Resource& resource, const std::string& ns,
                                      const ListOptions& options) override;
  absl::StatusOr<nlohmann::json> Create(const Resource& resource, const std::string& ns,
                                        const nlohmann::json& object) override;
  absl::StatusOr<nlohmann::json> Update(const Resource& resource, const std::string& ns,
                                        const nlohmann::json& object, bool status) override;
  absl::StatusOr<nlohmann::json> MergePatch(const Resource& resource, const std::string& ns,
                                            const std::string& name, const nlohmann::json& patch,
                                            bool status) override;
  absl::Status Delete(const Resource& resource, const std::string& ns,
                      const std::string& name) override;
  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& resource,
                                                     const std::string& ns,
                                                     const WatchOptions& options) override;
  // Streams like a watch: each line is read as it arrives; a follow that
  // stays silent longer than the watch timeout ends with Unavailable.
  absl::StatusOr<std::unique_ptr<LogStream>> StreamLog(const std::string& ns,
                                                       const std::string& pod,
                                                       const LogOptions& options) override;

  class Impl;

 private:
  explicit RestClusterClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The request path of a collection or object: /api/v1/namespaces/NS/pods[/NAME[/status]].
std::string ResourcePath(const Resource& resource, const std::string& ns,
                         const std::string& name = "", bool status = false);

}  // namespace kubetrain::kube
