#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace kubetrain::kube {

// The one seam where Kubernetes API answers become absl::Status.
//
//   404          -> NotFound
//   409 reason AlreadyExists -> AlreadyExists; other 409 (Conflict) -> Aborted
//   410          -> FailedPrecondition, IsGone() true
//   400, 422     -> InvalidArgument
//   401 / 403    -> Unauthenticated / PermissionDenied
//   429          -> ResourceExhausted (retryable)
//   500-599      -> Unavailable (retryable; 504 too)
//   other        -> Unknown
// Every status carries the HTTP code as a payload (kHttpCodePayload) and a
// message "<context>: <code> <reason>: <server message>".
absl::Status StatusFromHttp(int http_code, const nlohmann::json& body, absl::string_view context);

inline constexpr char kHttpCodePayload[] = "kubetrain.io/http-code";
// The server's own message (the Status body's), when it gave one.
inline constexpr char kServerMessagePayload[] = "kubetrain.io/server-message";

// The HTTP code a status came from; 0 when it did not come from an answer.
int HttpCode(const absl::Status& status);
// The server's words for a refusal (`pods "x" is forbidden: ...`), without
// the client's context; the status's message when the server gave none.
std::string ServerMessage(const absl::Status& status);
bool IsGone(const absl::Status& status);
bool IsConflict(const absl::Status& status);  // 409 Conflict (not AlreadyExists)
// Worth retrying as is: 429, 5xx, connection failures (Unavailable,
// DeadlineExceeded, ResourceExhausted).
bool IsRetryable(const absl::Status& status);

}  // namespace kubetrain::kube
