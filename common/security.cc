#include "common/security.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace sift {
namespace {

constexpr char kRefusalPayload[] = "sift.dev/auth-refusal";

// "server-12" -> 12 when `name` is prefix + decimal digits (no sign, no leading '+').
bool IndexAfter(absl::string_view name, absl::string_view prefix, int64_t* index) {
  if (!absl::ConsumePrefix(&name, prefix) || name.empty() || name.size() > 9) return false;
  for (char c : name) {
    if (c < '0' || c > '9') return false;
  }
  return absl::SimpleAtoi(name, index);
}

const char* NeedsText(CallerNeeds needs) {
  switch (needs) {
    case CallerNeeds::kReader:
      return "a user's bearer token (role reader, operator or admin)";
    case CallerNeeds::kReadJob:
      return "a user's bearer token (role reader, operator or admin) or a member certificate";
    case CallerNeeds::kOperator:
      return "a user's bearer token with role operator or admin";
    case CallerNeeds::kMember:
      return "a cluster member certificate (server-<i>, worker-<i> or worker)";
    case CallerNeeds::kWorker:
      return "a worker's certificate (worker-<i> or worker)";
  }
  return "?";
}

}  // namespace

const char* UserRoleName(UserRole role) {
  switch (role) {
    case UserRole::kReader:
      return "reader";
    case UserRole::kOperator:
      return "operator";
    case UserRole::kAdmin:
      return "admin";
    case UserRole::kNone:
      break;
  }
  return "none";
}

StatusOr<UserRole> ParseUserRole(absl::string_view name) {
  if (name == "reader") return UserRole::kReader;
  if (name == "operator") return UserRole::kOperator;
  if (name == "admin") return UserRole::kAdmin;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown role '", name, "' (one of: admin, operator, reader)"));
}

StatusOr<MemberName> ParseMemberName(absl::string_view cn) {
  MemberName m;
  if (cn == "worker") return m;
  if (cn == "coordinator") {
    m.kind = MemberName::kCoordinator;
    return m;
  }
  if (IndexAfter(cn, "worker-", &m.index)) return m;
  if (IndexAfter(cn, "server-", &m.index)) {
    m.kind = MemberName::kServer;
    return m;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "certificate CN '", cn, "' is not a sift member (server-<i>, worker-<i>, worker)"));
}

std::string Principal::Describe() const {
  std::string who;
  if (!member.empty()) {
    who = absl::StrCat("member ", member);
  } else if (!user.empty()) {
    who = absl::StrCat("user ", user, " (", UserRoleName(role), ")");
  } else {
    who = "an anonymous caller";
  }
  if (!peer.empty()) absl::StrAppend(&who, " from ", peer);
  return who;
}

Status AuthRefusal(absl::StatusCode code, absl::string_view message) {
  Status s(code, message);
  s.SetPayload(kRefusalPayload, absl::Cord("1"));
  return s;
}

bool IsAuthRefusal(const Status& status) {
  return !status.ok() && status.GetPayload(kRefusalPayload).has_value();
}

Status CheckCaller(const Principal& who, CallerNeeds needs, absl::string_view method) {
  if (!who.checked) return absl::OkStatus();
  if (needs == CallerNeeds::kReadJob) {
    if (!who.member.empty()) return CheckCaller(who, CallerNeeds::kMember, method);
    needs = CallerNeeds::kReader;
  }
  const bool wants_user = needs == CallerNeeds::kReader || needs == CallerNeeds::kOperator;
  if (wants_user) {
    if (who.user.empty()) {
      const std::string presented =
          who.member.empty()
              ? who.token_problem
              : absl::StrCat("a member certificate (", who.member, ") but no user token");
      return AuthRefusal(absl::StatusCode::kUnauthenticated,
                         absl::StrCat(method, " needs ", NeedsText(needs), "; the call presented ",
                                      presented.empty() ? "none" : presented,
                                      " (pass --token-file or set $SIFT_TOKEN_FILE)"));
    }
    if (needs == CallerNeeds::kOperator && who.role < UserRole::kOperator) {
      return AuthRefusal(absl::StatusCode::kPermissionDenied,
                         absl::StrCat(method, " needs ", NeedsText(needs), "; user ", who.user,
                                      " has role ", UserRoleName(who.role)));
    }
    return absl::OkStatus();
  }
  if (who.member.empty()) {
    return AuthRefusal(
        who.user.empty() ? absl::StatusCode::kUnauthenticated : absl::StatusCode::kPermissionDenied,
        absl::StrCat(method, " is a cluster member call: it needs ", NeedsText(needs),
                     "; the call presented ",
                     who.user.empty() ? "no client certificate"
                                      : absl::StrCat("user ", who.user, "'s token")));
  }
  StatusOr<MemberName> name = ParseMemberName(who.member);
  const bool ok = name.ok() && name->kind != MemberName::kCoordinator &&
                  (needs == CallerNeeds::kMember || name->kind == MemberName::kWorker);
  if (!ok) {
    return AuthRefusal(absl::StatusCode::kPermissionDenied,
                       absl::StrCat(method, " needs ", NeedsText(needs),
                                    "; the call presented the certificate of ", who.member));
  }
  return absl::OkStatus();
}

Status CheckPrivateFile(const std::string& path, absl::string_view what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int e = errno;
    if (e == ENOENT) return absl::NotFoundError(absl::StrCat(what, " ", path, ": no such file"));
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", path, ": cannot stat: ", std::strerror(e)));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s %s is readable by every user of this machine (mode %04o): run `chmod 600 %s` "
        "(Kubernetes: defaultMode 0400 on its Secret volume)",
        what, path, st.st_mode & 07777, path));
  }
  return absl::OkStatus();
}

}  // namespace sift
