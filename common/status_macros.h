#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// RETURN_IF_ERROR(expr): returns the absl::Status from the enclosing function
// when expr is not OK.
#define KUBETRAIN_STATUS_CONCAT_INNER(a, b) a##b
#define KUBETRAIN_STATUS_CONCAT(a, b) KUBETRAIN_STATUS_CONCAT_INNER(a, b)

#define RETURN_IF_ERROR(expr)                              \
  do {                                                     \
    ::absl::Status kubetrain_status_ = (expr);             \
    if (!kubetrain_status_.ok()) return kubetrain_status_; \
  } while (0)

// ASSIGN_OR_RETURN(lhs, expr): evaluates a StatusOr<T> expression, returns its
// status on error, otherwise moves the value into lhs.
#define ASSIGN_OR_RETURN(lhs, expr) \
  KUBETRAIN_ASSIGN_OR_RETURN_IMPL(KUBETRAIN_STATUS_CONCAT(statusor_, __LINE__), lhs, expr)
#define KUBETRAIN_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                                    \
  if (!statusor.ok()) return std::move(statusor).status();   \
  lhs = std::move(statusor).value()
