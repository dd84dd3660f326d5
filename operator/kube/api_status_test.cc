#include "operator/kube/api_status.h"

#include "gtest/gtest.h"

namespace kubetrain::kube {
namespace {

using nlohmann::json;

json StatusBody(int code, const std::string& reason) {
  return {{"kind", "Status"}, {"code", code}, {"reason", reason}, {"message", "pods \"a\" x"}};
}

TEST(ApiStatusTest, DistinguishesAlreadyExistsFromConflict) {
  absl::Status exists = StatusFromHttp(409, StatusBody(409, "AlreadyExists"), "POST /p");
  EXPECT_EQ(exists.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_FALSE(IsConflict(exists));
  absl::Status conflict = StatusFromHttp(409, StatusBody(409, "Conflict"), "PUT /p");
  EXPECT_EQ(conflict.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(IsConflict(conflict));
  EXPECT_NE(conflict.message().find("PUT /p: 409 Conflict: pods \"a\" x"), std::string::npos)
      << conflict.message();
}

TEST(ApiStatusTest, MapsCodes) {
  EXPECT_TRUE(StatusFromHttp(200, json(), "x").ok());
  EXPECT_TRUE(StatusFromHttp(201, json(), "x").ok());
  EXPECT_EQ(StatusFromHttp(404, json(), "x").code(), absl::StatusCode::kNotFound);
  absl::Status gone = StatusFromHttp(410, StatusBody(410, "Expired"), "x");
  EXPECT_TRUE(IsGone(gone));
  EXPECT_FALSE(IsRetryable(gone));
  EXPECT_EQ(StatusFromHttp(422, json(), "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(StatusFromHttp(403, json(), "x").code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(StatusFromHttp(401, json(), "x").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(IsRetryable(StatusFromHttp(429, json(), "x")));
  EXPECT_TRUE(IsRetryable(StatusFromHttp(500, json(), "x")));
  EXPECT_TRUE(IsRetryable(StatusFromHttp(503, "not json either", "x")));
  EXPECT_FALSE(IsRetryable(StatusFromHttp(404, json(), "x")));
  EXPECT_EQ(HttpCode(StatusFromHttp(503, json(), "x")), 503);
  EXPECT_EQ(HttpCode(absl::UnavailableError("no answer")), 0);
}

TEST(ApiStatusTest, KeepsTheServersWordsApart) {
  absl::Status refused = StatusFromHttp(403, StatusBody(403, "Forbidden"), "POST /api/v1/pods");
  EXPECT_EQ(refused.message(), "POST /api/v1/pods: 403 Forbidden: pods \"a\" x");
  EXPECT_EQ(ServerMessage(refused), "pods \"a\" x");
  // No body: the whole message is all there is to tell.
  absl::Status bare = StatusFromHttp(502, json(), "GET /x");
  EXPECT_EQ(ServerMessage(bare), "GET /x: 502");
}

}  // namespace
}  // namespace kubetrain::kube
