#include "operator/kube/api_status.h"

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kubetrain::kube {

absl::Status StatusFromHttp(int http_code, const nlohmann::json& body, absl::string_view context) {
  if (http_code >= 200 && http_code < 300) return absl::OkStatus();
  std::string reason, message;
  if (body.is_object()) {
    auto r = body.find("reason");
    if (r != body.end() && r->is_string()) reason = r->get<std::string>();
    auto m = body.find("message");
    if (m != body.end() && m->is_string()) message = m->get<std::string>();
  }
  std::string text = absl::StrCat(context, ": ", http_code, reason.empty() ? "" : " ", reason,
                                  message.empty() ? "" : ": ", message);
  absl::StatusCode code;
  if (http_code == 404) {
    code = absl::StatusCode::kNotFound;
  } else if (http_code == 409) {
    code =
        reason == "AlreadyExists" ? absl::StatusCode::kAlreadyExists : absl::StatusCode::kAborted;
  } else if (http_code == 410) {
    code = absl::StatusCode::kFailedPrecondition;
  } else if (http_code == 400 || http_code == 422) {
    code = absl::StatusCode::kInvalidArgument;
  } else if (http_code == 401) {
    code = absl::StatusCode::kUnauthenticated;
  } else if (http_code == 403) {
    code = absl::StatusCode::kPermissionDenied;
  } else if (http_code == 429) {
    code = absl::StatusCode::kResourceExhausted;
  } else if (http_code >= 500 && http_code < 600) {
    code = absl::StatusCode::kUnavailable;
  } else {
    code = absl::StatusCode::kUnknown;
  }
  absl::Status status(code, text);
  status.SetPayload(kHttpCodePayload, absl::Cord(std::to_string(http_code)));
  if (!message.empty()) status.SetPayload(kServerMessagePayload, absl::Cord(message));
  return status;
}

int HttpCode(const absl::Status& status) {
  auto payload = status.GetPayload(kHttpCodePayload);
  int code = 0;
  if (!payload || !absl::SimpleAtoi(std::string(*payload), &code)) return 0;
  return code;
}

std::string ServerMessage(const absl::Status& status) {
  auto payload = status.GetPayload(kServerMessagePayload);
  return payload ? std::string(*payload) : std::string(status.message());
}

bool IsGone(const absl::Status& status) { return HttpCode(status) == 410; }

bool IsConflict(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted && HttpCode(status) == 409;
}

bool IsRetryable(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kResourceExhausted:
      return true;
    default:
      return false;
  }
}

}  // namespace kubetrain::kube
