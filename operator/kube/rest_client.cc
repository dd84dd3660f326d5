#define _TURN_OFF_PLATFORM_STRING  // cpprest's U() macro collides with other headers
#include "operator/kube/rest_client.h"

#include <cpprest/containerstream.h>
#include <cpprest/http_client.h>
#include <pplx/threadpool.h>

#include <algorithm>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "operator/kube/api_status.h"
#include "operator/kube/rate_limiter.h"

namespace kubetrain::kube {
namespace {

namespace http = web::http;
using nlohmann::json;

std::string Query(const std::vector<std::pair<std::string, std::string>>& params) {
  std::string out;
  for (const auto& [key, value] : params) {
    if (value.empty()) continue;
    absl::StrAppend(&out, out.empty() ? "?" : "&", key, "=", web::uri::encode_data_string(value));
  }
  return out;
}

// Installs the CA, client certificate and key into an OpenSSL context.
// Throws boost::system::system_error on bad PEM (callers catch).
void ConfigureTls(const ClusterConfig& config, boost::asio::ssl::context& ctx) {
  if (!config.ca_pem.empty()) {
    ctx.add_certificate_authority(boost::asio::buffer(config.ca_pem));
  } else {
    ctx.set_default_verify_paths();
  }
  if (!config.client_certificate_pem.empty()) {
    ctx.use_certificate_chain(boost::asio::buffer(config.client_certificate_pem));
    ctx.use_private_key(boost::asio::buffer(config.client_key_pem), boost::asio::ssl::context::pem);
  }
}

// The lines of a streamed response body (watch events, container logs), read
// in chunks of what has arrived: cpprestsdk's read_line takes one byte at a
// time, each through the stream buffer's lock, which costs a watch of many
// events more CPU than its JSON. Throws what the body's stream throws.
class BodyLines {
 public:
  explicit BodyLines(concurrency::streams::istream body) : body_(std::move(body)) {}

  // The next line without its '\n' (a '\r' before it stays); nullopt at the
  // end of the body (what is left without a newline is the last line).
  std::optional<std::string> Next() {
    for (;;) {
      if (size_t newline = pending_.find('\n', std::max(start_, scanned_));
          newline != std::string::npos) {
        std::string line = pending_.substr(start_, newline - start_);
        start_ = scanned_ = newline + 1;
        return line;
      }
      // Lines taken leave the buffer once per read, not once per line.
      pending_.erase(0, start_);
      scanned_ = pending_.size();
      start_ = 0;
      concurrency::streams::streambuf<uint8_t> buffer = body_.streambuf();
      // Wait for one byte, then take whatever else has arrived with it.
      const auto first = buffer.bumpc().get();
      if (first == concurrency::streams::streambuf<uint8_t>::traits::eof()) {
        if (pending_.empty()) return std::nullopt;
        return std::exchange(pending_, std::string());
      }
      pending_.push_back(static_cast<char>(first));
      if (const size_t available = buffer.in_avail(); available > 0) {
        const size_t at = pending_.size();
        pending_.resize(at + available);
        const size_t got =
            buffer.getn(reinterpret_cast<uint8_t*>(pending_.data() + at), available).get();
        pending_.resize(at + got);
      }
    }
  }

 private:
  concurrency::streams::istream body_;
  std::string pending_;  // read; from start_ on, not yet returned
  size_t start_ = 0;
  size_t scanned_ = 0;  // pending_ has no '\n' from start_ to here
};

class RestWatchStream : public WatchStream {
 public:
  RestWatchStream(http::http_response response, pplx::cancellation_token_source cancel,
                  std::string context)
      : response_(std::move(response)),
        lines_(response_.body()),
        cancel_(std::move(cancel)),
        context_(std::move(context)) {}
  ~RestWatchStream() override { Cancel(); }

  absl::StatusOr<std::optional<WatchEvent>> Next() override {
    for (;;) {
      std::optional<std::string> line;
      try {
        line = lines_.Next();
      } catch (const std::exception& e) {
        if (cancel_.get_token().is_canceled()) return std::optional<WatchEvent>();
        return absl::UnavailableError(absl::StrCat(context_, ": watch stream: ", e.what()));
      }
      if (!line || cancel_.get_token().is_canceled()) return std::optional<WatchEvent>();
      const std::string& text = *line;
      if (text.empty() || text == "\r") continue;
      json event = json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (event.is_discarded() || !event.is_object() || !event.contains("type") ||
          !event["type"].is_string() || !event.contains("object")) {
        return absl::DataLossError(
            absl::StrCat(context_, ": malformed watch event: ", text.substr(0, 200)));
      }
      return std::optional<WatchEvent>(
          WatchEvent{event["type"].get<std::string>(), std::move(event["object"])});
    }
  }

  void Cancel() override { cancel_.cancel(); }

 private:
  http::http_response response_;
  BodyLines lines_;
  pplx::cancellation_token_source cancel_;
  std::string context_;
};

class RestLogStream : public LogStream {
 public:
  RestLogStream(http::http_response response, pplx::cancellation_token_source cancel,
                std::string context)
      : response_(std::move(response)),
        lines_(response_.body()),
        cancel_(std::move(cancel)),
        context_(std::move(context)) {}
  ~RestLogStream() override { Cancel(); }

  absl::StatusOr<std::optional<std::string>> NextLine() override {
    std::optional<std::string> line;
    try {
      line = lines_.Next();
    } catch (const std::exception& e) {
      if (cancel_.get_token().is_canceled()) return std::optional<std::string>();
      return absl::UnavailableError(absl::StrCat(context_, ": log stream: ", e.what()));
    }
    // An empty log line is a line; the body's end, or an empty read once
    // cancelled, is the end.
    if (!line || (line->empty() && cancel_.get_token().is_canceled())) {
      return std::optional<std::string>();
    }
    if (!line->empty() && line->back() == '\r') line->pop_back();
    return line;
  }

  void Cancel() override { cancel_.cancel(); }

 private:
  http::http_response response_;
  BodyLines lines_;
  pplx::cancellation_token_source cancel_;
  std::string context_;
};

}  // namespace

std::string ResourcePath(const Resource& resource, const std::string& ns, const std::string& name,
                         bool status) {
  std::string path = absl::StrCat("/", resource.api_prefix);
  if (!ns.empty()) absl::StrAppend(&path, "/namespaces/", web::uri::encode_data_string(ns));
  absl::StrAppend(&path, "/", resource.plural);
  if (!name.empty()) absl::StrAppend(&path, "/", web::uri::encode_data_string(name));
  if (status) absl::StrAppend(&path, "/status");
  return path;
}

class RestClusterClient::Impl {
 public:
  Impl(ClusterConfig config, RestClientOptions options)
      : config_(std::move(config)),
        options_(std::move(options)),
        limiter_(options_.qps, options_.burst) {}

  absl::Status Init() {
    try {
      web::uri base(config_.server);
      if (base.scheme() != "http" && base.scheme() != "https") {
        return absl::InvalidArgumentError(
            absl::StrCat("server ", config_.server, ": not an http(s) URL"));
      }
      if (base.scheme() == "https") {
        // Fail early on unusable PEM rather than on every connection.
        boost::asio::ssl::context probe(boost::asio::ssl::context::sslv23);
        ConfigureTls(config_, probe);
      }
      client_ =
          std::make_unique<http::client::http_client>(base, MakeConfig(options_.request_timeout));
      watch_client_ = std::make_unique<http::client::http_client>(
          base, MakeConfig(absl::Seconds(options_.watch_timeout_seconds + 30)));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("cluster ", config_.server, ": ", e.what()));
    }
    if (!config_.bearer_token.empty()) {
      authorization_ = absl::StrCat("Bearer ", config_.bearer_token);
    } else if (!config_.username.empty()) {
      authorization_ =
          absl::StrCat("Basic ", absl::Base64Escape(config_.username + ":" + config_.password));
    }
    return absl::OkStatus();
  }

  http::client::http_client_config MakeConfig(absl::Duration timeout) const {
    http::client::http_client_config cfg;
    cfg.set_timeout(std::chrono::microseconds(absl::ToInt64Microseconds(timeout)));
    cfg.set_validate_certificates(!config_.insecure_skip_tls_verify);
    ClusterConfig tls = config_;
    cfg.set_ssl_context_callback([tls](boost::asio::ssl::context& ctx) {
      try {
        ConfigureTls(tls, ctx);
      } catch (const std::exception&) {
        // Validated in Init(); a failure here leaves verification to fail.
      }
    });
    return cfg;
  }

  http::http_request NewRequest(const http::method& method, const std::string& uri,
                                const std::string& accept = "application/json") const {
    http::http_request req(method);
    req.set_request_uri(uri);
    req.headers().add("Accept", accept);
    req.headers().add("User-Agent", options_.user_agent);
    if (!authorization_.empty()) req.headers().add("Authorization", authorization_);
    return req;
  }

  void Count(std::string_view verb, int code) {
    if (options_.on_request) options_.on_request(verb, code);
  }

  absl::StatusOr<json> Do(std::string_view verb, const http::method& method, const std::string& uri,
                          const json* body, const std::string& content_type = "application/json") {
    limiter_.Wait();
    std::string context = absl::StrCat(method, " ", uri);
    http::http_request req = NewRequest(method, uri);
    if (body != nullptr) req.set_body(body->dump(), content_type);
    int code;
    std::string text;
    try {
      http::http_response resp = client_->request(req).get();
      code = resp.status_code();
      text = resp.extract_utf8string(true).get();
    } catch (const std::exception& e) {
      Count(verb, 0);
      return absl::UnavailableError(absl::StrCat(context, ": ", e.what()));
    }
    Count(verb, code);
    json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded()) parsed = json();
    absl::Status status = StatusFromHttp(code, parsed, context);
    if (!status.ok()) return status;
    if (!parsed.is_object()) {
      return absl::DataLossError(absl::StrCat(context, ": the answer is not a JSON object"));
    }
    return parsed;
  }

  absl::StatusOr<std::unique_ptr<WatchStream>> Watch(const Resource& resource,
                                                     const std::string& ns,
                                                     const WatchOptions& options) {
    limiter_.Wait();
    int timeout =
        options.timeout_seconds > 0 ? options.timeout_seconds : options_.watch_timeout_seconds;
    std::string uri = ResourcePath(resource, ns) +
                      Query({{"watch", "true"},
                             {"resourceVersion", options.resource_version},
                             {"labelSelector", options.label_selector},
                             {"allowWatchBookmarks", options.allow_bookmarks ? "true" : ""},
                             {"timeoutSeconds", std::to_string(timeout)}});
    std::string context = absl::StrCat("GET ", uri);
    pplx::cancellation_token_source cancel;
    try {
      http::http_response resp =
          watch_client_->request(NewRequest(http::methods::GET, uri), cancel.get_token()).get();
      Count("watch", resp.status_code());
      if (resp.status_code() != 200) {
        std::string text = resp.extract_utf8string(true).get();
        json parsed = json::parse(text, nullptr, false);
        return StatusFromHttp(resp.status_code(), parsed.is_discarded() ? json() : parsed, context);
      }
      return std::unique_ptr<WatchStream>(
          new RestWatchStream(std::move(resp), std::move(cancel), context));
    } catch (const std::exception& e) {
      Count("watch", 0);
      return absl::UnavailableError(absl::StrCat(context, ": ", e.what()));
    }
  }

  absl::StatusOr<std::unique_ptr<LogStream>> StreamLog(const std::string& ns,
                                                       const std::string& pod,
                                                       const LogOptions& options) {
    limiter_.Wait();
    std::string uri = ResourcePath(kPods, ns, pod) + "/log" +
                      Query({{"container", options.container},
                             {"follow", options.follow ? "true" : ""},
                             {"previous", options.previous ? "true" : ""},
                             {"timestamps", options.timestamps ? "true" : ""},
                             {"sinceTime", options.since_time}});
    std::string context = absl::StrCat("GET ", uri);
    pplx::cancellation_token_source cancel;
    try {
      // The log is text/plain; errors still come as a JSON Status (kubectl
      // asks the same way).
      http::http_response resp =
          watch_client_
              ->request(NewRequest(http::methods::GET, uri, "application/json, */*"),
                        cancel.get_token())
              .get();
      Count("get", resp.status_code());
      if (resp.status_code() != 200) {
        std::string text = resp.extract_utf8string(true).get();
        json parsed = json::parse(text, nullptr, false);
        return StatusFromHttp(resp.status_code(), parsed.is_discarded() ? json() : parsed, context);
      }
      return std::unique_ptr<LogStream>(
          new RestLogStream(std::move(resp), std::move(cancel), context));
    } catch (const std::exception& e) {
      Count("get", 0);
      return absl::UnavailableError(absl::StrCat(context, ": ", e.what()));
    }
  }

 private:
  const ClusterConfig config_;
  const RestClientOptions options_;
  TokenBucket limiter_;
  std::string authorization_;
  std::unique_ptr<http::client::http_client> client_;
  std::unique_ptr<http::client::http_client> watch_client_;

  friend class RestClusterClient;
};

RestClusterClient::RestClusterClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RestClusterClient::~RestClusterClient() = default;

absl::StatusOr<std::unique_ptr<RestClusterClient>> RestClusterClient::Create(
    const ClusterConfig& config, const RestClientOptions& options) {
  auto impl = std::make_unique<Impl>(config, options);
  absl::Status status = impl->Init();
  if (!status.ok()) return status;
  return std::unique_ptr<RestClusterClient>(new RestClusterClient(std::move(impl)));
}

absl::StatusOr<json> RestClusterClient::Get(const Resource& resource, const std::string& ns,
                                            const std::string& name) {
  return impl_->Do("get", http::methods::GET, ResourcePath(resource, ns, name), nullptr);
}

absl::StatusOr<json> RestClusterClient::List(const Resource& resource, const std::string& ns,
                                             const ListOptions& options) {
  std::string uri = ResourcePath(resource, ns) +
                    Query({{"labelSelector", options.label_selector},
                           {"fieldSelector", options.field_selector},
                           {"limit", options.limit > 0 ? std::to_string(options.limit) : ""},
                           {"continue", options.continue_token}});
  return impl_->Do("list", http::methods::GET, uri, nullptr);
}

absl::StatusOr<json> RestClusterClient::Create(const Resource& resource, const std::string& ns,
                                               const json& object) {
  return impl_->Do("create", http::methods::POST, ResourcePath(resource, ns), &object);
}

absl::StatusOr<json> RestClusterClient::Update(const Resource& resource, const std::string& ns,
                                               const json& object, bool status) {
  std::string name;
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object() &&
      object["metadata"].contains("name") && object["metadata"]["name"].is_string()) {
    name = object["metadata"]["name"].get<std::string>();
  }
  if (name.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("update ", resource.plural, ": metadata.name is required"));
  }
  return impl_->Do("update", http::methods::PUT, ResourcePath(resource, ns, name, status), &object);
}

absl::StatusOr<json> RestClusterClient::MergePatch(const Resource& resource, const std::string& ns,
                                                   const std::string& name, const json& patch,
                                                   bool status) {
  return impl_->Do("patch", http::methods::PATCH, ResourcePath(resource, ns, name, status), &patch,
                   "application/merge-patch+json");
}

absl::Status RestClusterClient::Delete(const Resource& resource, const std::string& ns,
                                       const std::string& name) {
  json options = {
      {"kind", "DeleteOptions"}, {"apiVersion", "v1"}, {"propagationPolicy", "Background"}};
  return impl_->Do("delete", http::methods::DEL, ResourcePath(resource, ns, name), &options)
      .status();
}

absl::StatusOr<std::unique_ptr<WatchStream>> RestClusterClient::Watch(const Resource& resource,
                                                                      const std::string& ns,
                                                                      const WatchOptions& options) {
  return impl_->Watch(resource, ns, options);
}

absl::StatusOr<std::unique_ptr<LogStream>> RestClusterClient::StreamLog(const std::string& ns,
                                                                        const std::string& pod,
                                                                        const LogOptions& options) {
  return impl_->StreamLog(ns, pod, options);
}

bool SetClientIoThreads(size_t threads) {
  try {
    crossplat::threadpool::initialize_with_threads(std::max<size_t>(threads, 1));
    return true;
  } catch (const std::exception&) {
    return false;  // made already
  }
}

}  // namespace kubetrain::kube
