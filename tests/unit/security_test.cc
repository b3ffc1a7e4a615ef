// common/security.h: member names, roles, CheckCaller's decisions for every kind of caller and
// need, the refusal mark, and CheckPrivateFile's modes.
#include "common/security.h"

#include <sys/stat.h>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

TEST(MemberNameTest, TheFourFormsAndNothingElse) {
  auto w = ParseMemberName("worker");
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->kind, MemberName::kWorker);
  EXPECT_EQ(w->index, -1);
  auto w3 = ParseMemberName("worker-3");
  ASSERT_TRUE(w3.ok());
  EXPECT_EQ(w3->index, 3);
  auto s12 = ParseMemberName("server-12");
  ASSERT_TRUE(s12.ok());
  EXPECT_EQ(s12->kind, MemberName::kServer);
  EXPECT_EQ(s12->index, 12);
  EXPECT_EQ(ParseMemberName("coordinator")->kind, MemberName::kCoordinator);
  for (const char* bad : {"", "server", "server-", "server--1", "server-+1", "server-1x",
                          "worker-1234567890", "Worker-1", "admin", "server-0 "}) {
    EXPECT_FALSE(ParseMemberName(bad).ok()) << bad;
  }
}

TEST(UserRoleTest, ParsesTheThreeRoles) {
  EXPECT_EQ(*ParseUserRole("reader"), UserRole::kReader);
  EXPECT_EQ(*ParseUserRole("operator"), UserRole::kOperator);
  EXPECT_EQ(*ParseUserRole("admin"), UserRole::kAdmin);
  EXPECT_THAT(ParseUserRole("root").status().message(), HasSubstr("admin, operator, reader"));
}

Principal User(const std::string& name, UserRole role) {
  Principal p;
  p.checked = true;
  p.user = name;
  p.role = role;
  return p;
}
Principal Member(const std::string& cn) {
  Principal p;
  p.checked = true;
  p.member = cn;
  return p;
}

TEST(CheckCallerTest, EveryCallerAgainstEveryNeed) {
  Principal anonymous;
  anonymous.checked = true;
  const Principal reader = User("rita", UserRole::kReader);
  const Principal op = User("alice", UserRole::kOperator);
  const Principal admin = User("root", UserRole::kAdmin);
  const Principal worker = Member("worker-0"), any_worker = Member("worker");
  const Principal server = Member("server-1"), coordinator = Member("coordinator");
  const Principal stranger = Member("mallory");
  using C = absl::StatusCode;
  struct Row {
    const Principal* who;
    CallerNeeds needs;
    C want;
  };
  const Row rows[] = {
      {&anonymous, CallerNeeds::kReader, C::kUnauthenticated},
      {&anonymous, CallerNeeds::kOperator, C::kUnauthenticated},
      {&anonymous, CallerNeeds::kMember, C::kUnauthenticated},
      {&anonymous, CallerNeeds::kWorker, C::kUnauthenticated},
      {&reader, CallerNeeds::kReader, C::kOk},
      {&reader, CallerNeeds::kOperator, C::kPermissionDenied},
      {&reader, CallerNeeds::kMember, C::kPermissionDenied},
      {&op, CallerNeeds::kReader, C::kOk},
      {&op, CallerNeeds::kOperator, C::kOk},
      {&op, CallerNeeds::kWorker, C::kPermissionDenied},
      {&admin, CallerNeeds::kOperator, C::kOk},
      {&admin, CallerNeeds::kWorker, C::kPermissionDenied},
      {&worker, CallerNeeds::kWorker, C::kOk},
      {&any_worker, CallerNeeds::kWorker, C::kOk},
      {&worker, CallerNeeds::kMember, C::kOk},
      {&worker, CallerNeeds::kReader, C::kUnauthenticated},
      {&server, CallerNeeds::kMember, C::kOk},
      {&server, CallerNeeds::kWorker, C::kPermissionDenied},
      {&coordinator, CallerNeeds::kMember, C::kPermissionDenied},
      {&stranger, CallerNeeds::kMember, C::kPermissionDenied},
      {&anonymous, CallerNeeds::kReadJob, C::kUnauthenticated},
      {&reader, CallerNeeds::kReadJob, C::kOk},
      {&worker, CallerNeeds::kReadJob, C::kOk},
      {&server, CallerNeeds::kReadJob, C::kOk},
      {&coordinator, CallerNeeds::kReadJob, C::kPermissionDenied},
  };
  for (const Row& r : rows) {
    const Status s = CheckCaller(*r.who, r.needs, "Method");
    EXPECT_EQ(s.code(), r.want) << r.who->Describe() << " needs " << static_cast<int>(r.needs)
                                << ": " << s;
    if (!s.ok()) {
      EXPECT_TRUE(IsAuthRefusal(s));
      EXPECT_THAT(s.message(), HasSubstr("Method"));
    }
  }
  // Security off: everything passes.
  EXPECT_TRUE(CheckCaller(Principal::Unchecked(), CallerNeeds::kWorker, "Pull").ok());
  // A plain error of the same code is not a refusal.
  EXPECT_FALSE(IsAuthRefusal(absl::PermissionDeniedError("EACCES")));
}

TEST(CheckPrivateFileTest, OthersMustHaveNoAccess) {
  testing::TempDir dir;
  const std::string path = dir.Sub("key");
  ASSERT_TRUE(WriteFileAtomic(path, "secret").ok());
  for (mode_t ok : {0600, 0400, 0640, 0440}) {
    ASSERT_EQ(::chmod(path.c_str(), ok), 0);
    EXPECT_TRUE(CheckPrivateFile(path, "the key").ok()) << std::oct << ok;
  }
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  const Status s = CheckPrivateFile(path, "the key");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), HasSubstr("chmod 600"));
  EXPECT_THAT(s.message(), HasSubstr("0644"));
  EXPECT_EQ(CheckPrivateFile(dir.Sub("none"), "the key").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace sift
