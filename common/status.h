// Error handling for sift: absl::Status / absl::StatusOr as values across every boundary.
//
// Codes are chosen by what the caller should do: INVALID_ARGUMENT / DATA_LOSS / FAILED_PRECONDITION
// mean "do not retry, fix the input"; UNAVAILABLE means "retry the call". Messages name what and
// where: a file, a line or record, a field.
#pragma once

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace sift {

using absl::Status;
using absl::StatusOr;

// Evaluates `expr` (an absl::Status); returns it from the enclosing function when not OK.
#define SIFT_RETURN_IF_ERROR(expr) \
  SIFT_RETURN_IF_ERROR_IMPL_(SIFT_STATUS_CONCAT_(sift_status_, __COUNTER__), expr)
#define SIFT_RETURN_IF_ERROR_IMPL_(var, expr) \
  do {                                        \
    ::absl::Status var = (expr);              \
    if (!var.ok()) return var;                \
  } while (0)

#define SIFT_STATUS_CONCAT_INNER_(a, b) a##b
#define SIFT_STATUS_CONCAT_(a, b) SIFT_STATUS_CONCAT_INNER_(a, b)

// `SIFT_ASSIGN_OR_RETURN(auto x, MakeX());` — unwraps a StatusOr or returns its error.
#define SIFT_ASSIGN_OR_RETURN(lhs, expr) \
  SIFT_ASSIGN_OR_RETURN_IMPL_(SIFT_STATUS_CONCAT_(sift_statusor_, __COUNTER__), lhs, expr)
#define SIFT_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return std::move(tmp).status();    \
  lhs = std::move(tmp).value()

// Prefixes a non-OK status message with context ("file: message"), keeping its code.
inline Status Annotate(const Status& s, absl::string_view context) {
  if (s.ok()) return s;
  return Status(s.code(), absl::StrCat(context, ": ", s.message()));
}

}  // namespace sift
