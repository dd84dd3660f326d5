#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace kubetrain::observability {

// What an HTTP server answered.
struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
};

// One HTTP/1.0 GET over a plain TCP socket (Connection: close; the body is
// everything until the server closes). For tests and probes against local
// endpoints: no TLS, no redirects, no chunked decoding (HTTP/1.0 servers do
// not chunk).
//
// Errors: Unavailable when the connection fails or times out (`timeout`
// bounds each socket operation), Internal when the reply is not HTTP.
// Thread-safe (no shared state).
absl::StatusOr<HttpResponse> HttpGet(const std::string& host, int port, const std::string& path,
                                     absl::Duration timeout = absl::Seconds(10));

// The same for a request written out whole ("POST /x HTTP/1.1\r\nHost: h\r\n\r\n"),
// sent as it is: for tests of what a server does with other methods,
// headers or malformed requests.
absl::StatusOr<HttpResponse> HttpExchange(const std::string& host, int port,
                                          const std::string& request,
                                          absl::Duration timeout = absl::Seconds(10));

}  // namespace kubetrain::observability
