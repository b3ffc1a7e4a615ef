// Paths under an operator's root (common/file_util.h): normalization refuses "..", containment is
// by whole components, and the walk below a root never follows a symbolic link.
#include "common/file_util.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

TEST(FileUtilPathsTest, NormalizedAbsolutePathRefusesDotDotAndNormalizes) {
  auto p = NormalizedAbsolutePath("/a/./b//c/", "results_dir");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(*p, "/a/b/c");
  for (const char* bad : {"/a/../etc", "../x", "a/b/..", ".."}) {
    auto r = NormalizedAbsolutePath(bad, "checkpoint.resume_from");
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(r.status().message()),
                HasSubstr("checkpoint.resume_from: " + std::string(bad) + " has a '..'"));
  }
  p = NormalizedAbsolutePath("rel/dir", "x");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ((*p)[0], '/');
  EXPECT_EQ(NormalizedAbsolutePath("/", "x").value(), "/");
}

TEST(FileUtilPathsTest, PathIsUnderComparesWholeComponents) {
  EXPECT_TRUE(PathIsUnder("/srv/results", "/srv/results"));
  EXPECT_TRUE(PathIsUnder("/srv/results/a/b", "/srv/results"));
  EXPECT_FALSE(PathIsUnder("/srv/results2", "/srv/results"));
  EXPECT_FALSE(PathIsUnder("/srv", "/srv/results"));
  EXPECT_FALSE(PathIsUnder("/etc", "/srv/results"));
  EXPECT_TRUE(PathIsUnder("/etc", "/"));
  EXPECT_TRUE(PathIsUnder("/", "/"));
}

TEST(FileUtilPathsTest, TheWalkBelowARootRefusesSymlinksAndCreatesWhatIsMissing) {
  testing::TempDir dir;
  const std::string root = dir.Sub("root");
  ASSERT_TRUE(MakeDirs(root).ok());
  // Created, component by component.
  ASSERT_TRUE(CheckNoSymlinksUnder(root, root + "/a/b/c", /*create=*/true).ok());
  struct stat st;
  ASSERT_EQ(::lstat((root + "/a/b/c").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  // Missing without create: fine, nothing created.
  EXPECT_TRUE(CheckNoSymlinksUnder(root, root + "/x/y", /*create=*/false).ok());
  EXPECT_NE(::lstat((root + "/x").c_str(), &st), 0);
  // A symlink anywhere below the root, to a directory elsewhere: refused by name, and nothing
  // is created through it.
  const std::string victim = dir.Sub("victim");
  ASSERT_TRUE(MakeDirs(victim).ok());
  ASSERT_EQ(::symlink(victim.c_str(), (root + "/a/link").c_str()), 0);
  for (bool create : {false, true}) {
    Status s = CheckNoSymlinksUnder(root, root + "/a/link/job-1", create);
    ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(
        std::string(s.message()),
        HasSubstr(root + "/a/link is a symbolic link: sift never follows one under " + root));
  }
  EXPECT_NE(::lstat((victim + "/job-1").c_str(), &st), 0) << "created through the link";
  // The last component itself.
  EXPECT_EQ(CheckNoSymlinksUnder(root, root + "/a/link", false).code(),
            absl::StatusCode::kFailedPrecondition);
  // A file where a directory should be.
  ASSERT_TRUE(WriteFileAtomic(root + "/file", "x").ok());
  EXPECT_EQ(CheckNoSymlinksUnder(root, root + "/file/sub", true).code(),
            absl::StatusCode::kFailedPrecondition);
  // Not under the root at all.
  EXPECT_EQ(CheckNoSymlinksUnder(root, victim, true).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FileUtilPathsTest, AtomicWritesNeverWriteThroughALinkAtTheTempName) {
  testing::TempDir dir;
  const std::string victim = dir.Sub("victim.txt");
  ASSERT_TRUE(WriteFileAtomic(victim, "keep").ok());
  const std::string target = dir.Sub("out.txt");
  // The temp name AtomicFileWriter uses: "<path>.tmp.<pid>".
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  ASSERT_EQ(::symlink(victim.c_str(), tmp.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomic(target, "mine").ok());  // the link is replaced, not followed
  EXPECT_EQ(ReadFileToString(victim).value(), "keep");
  EXPECT_EQ(ReadFileToString(target).value(), "mine");
  // A hard link at the temp name: not truncated through either.
  ASSERT_EQ(::link(victim.c_str(), tmp.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomic(target, "again").ok());
  EXPECT_EQ(ReadFileToString(victim).value(), "keep");
}

}  // namespace
}  // namespace sift
