// Status propagation macros. Abseil 20220623 (Debian 12) ships no status macros, so the two we
// need are defined once here and used by every layer.
#ifndef TURBOKV_CODEC_STATUS_MACROS_H_
#define TURBOKV_CODEC_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TURBOKV_INTERNAL_CONCAT_INNER(a, b) a##b
#define TURBOKV_INTERNAL_CONCAT(a, b) TURBOKV_INTERNAL_CONCAT_INNER(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define TURBOKV_RETURN_IF_ERROR(expr)                  \
  do {                                                 \
    ::absl::Status turbokv_status_ = (expr);           \
    if (!turbokv_status_.ok()) return turbokv_status_; \
  } while (0)

// `TURBOKV_ASSIGN_OR_RETURN(auto x, Foo());` assigns the value of an absl::StatusOr or returns
// its status from the enclosing function.
#define TURBOKV_ASSIGN_OR_RETURN(lhs, rexpr)                                                   \
  TURBOKV_INTERNAL_ASSIGN_OR_RETURN(TURBOKV_INTERNAL_CONCAT(turbokv_statusor_, __LINE__), lhs, \
                                    rexpr)

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration, `statusor` a fresh name.
#define TURBOKV_INTERNAL_ASSIGN_OR_RETURN(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                                      \
  if (!statusor.ok()) return std::move(statusor).status();      \
  lhs = std::move(statusor).value()
// NOLINTEND(bugprone-macro-parentheses)

#endif  // TURBOKV_CODEC_STATUS_MACROS_H_
