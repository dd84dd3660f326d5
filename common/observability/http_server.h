#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace kubetrain::observability {

// One request as the server read it.
struct HttpRequest {
  std::string method;                          // "GET" or "HEAD": the server answers nothing else
  std::string path;                            // the target up to '?', still percent-encoded
  std::string query;                           // after '?', without it; "" when absent
  std::map<std::string, std::string> headers;  // names lower-cased, values trimmed
};

// What a handler answers. HEAD requests get the headers of the GET reply
// (Content-Length included) and no body.
struct HttpReply {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // Added after Content-Type, Content-Length and Connection. Cache-Control
  // is "no-store" unless given here.
  std::vector<std::pair<std::string, std::string>> headers;
};

// A small read-only HTTP/1.1 server: one request per connection (Connection:
// close), identity encoding, GET and HEAD only (anything else is answered 405
// before a handler sees it, so no handler can be reached by a writing
// method). An accept thread hands connections to `threads` workers on
// ordinary thread stacks; MetricsServer's header says why this is not
// civetweb (prometheus-cpp's Exposer).
//
// Limits: a request line plus headers over 16 KiB is answered 400; a peer
// that stops sending or reading for 5 s is dropped. Request bodies are not
// read.
//
// Thread-safe. The handler runs on the worker threads, several at once, so
// it must be thread-safe; it must not call back into this server.
class HttpServer {
 public:
  using Handler = std::function<HttpReply(const HttpRequest&)>;

  struct Options {
    // "HOST:PORT", "[V6HOST]:PORT" or ":PORT" (all interfaces); port 0 picks
    // a free port.
    std::string address = "127.0.0.1:0";
    // Worker threads.
    size_t threads = 2;
    // What the server is, for error messages ("metrics", "ui").
    std::string name = "http";
  };

  // Binds and starts serving. Errors: InvalidArgument for a malformed
  // address, Unavailable when the address cannot be bound; both name
  // Options::name and the address.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const Options& options, Handler handler);

  // Stops serving; in-flight requests finish first.
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // The bound port (the real one when Options asked for 0).
  int port() const { return port_; }
  // The bound host as given ("127.0.0.1", "::1"), "" for every interface.
  const std::string& host() const { return host_; }

 private:
  struct Connections;  // accepted, waiting for a worker

  HttpServer() = default;
  void AcceptLoop();
  void WorkerLoop();
  void Serve(int fd);

  Handler handler_;
  std::unique_ptr<Connections> connections_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::string host_;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace kubetrain::observability
