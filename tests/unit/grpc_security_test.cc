// common/grpc_security.h's TokenStore: the file format and its errors (file:line), lookups, and
// reloads on change, on request (SIGHUP's path), and a bad file keeping the tokens in use.
#include "common/grpc_security.h"

#include <signal.h>
#include <sys/stat.h>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

using ::testing::HasSubstr;

class TokenStoreTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& text, mode_t mode = 0600) {
    EXPECT_TRUE(WriteFileAtomic(path_, text).ok());
    ::chmod(path_.c_str(), mode);
    return path_;
  }
  testing::TempDir dir_;
  const std::string path_ = dir_.Sub("tokens.csv");
};

TEST_F(TokenStoreTest, FindsUsersByToken) {
  auto store =
      TokenStore::Open(Write("# token,user,role\n\n  aaaaaaaaaaaaaaaa1 , alice , operator "
                             "\nbbbbbbbbbbbbbbbb2,rita,reader\r\n"
                             "cccccccccccccccc3,root@example.com,admin\n"));
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->size(), 3u);
  auto alice = (*store)->Find("aaaaaaaaaaaaaaaa1");
  ASSERT_NE(alice, nullptr);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->role, UserRole::kOperator);
  EXPECT_EQ((*store)->Find("bbbbbbbbbbbbbbbb2")->role, UserRole::kReader);
  EXPECT_EQ((*store)->Find("cccccccccccccccc3")->name, "root@example.com");
  EXPECT_EQ((*store)->Find("aaaaaaaaaaaaaaaa"), nullptr);
  EXPECT_EQ((*store)->Find(""), nullptr);
}

TEST_F(TokenStoreTest, BadLinesNameFileAndLine) {
  struct Case {
    const char* text;
    const char* want;
  };
  const Case cases[] = {
      {"aaaaaaaaaaaaaaaa,alice\n", ":1: expected `token,user,role`, found 2 fields"},
      {"# c\nshort,alice,admin\n", ":2: the token must be 16"},
      {"aaaaaaaa aaaaaaaa,alice,admin\n", ":1: the token must be"},
      {"aaaaaaaaaaaaaaaa,al ice,admin\n", "user 'al ice'"},
      {"aaaaaaaaaaaaaaaa,alice,root\n", "unknown role 'root'"},
      {"aaaaaaaaaaaaaaaa,alice,admin\naaaaaaaaaaaaaaaa,bob,reader\n",
       ":2: this token is also on line 1"},
  };
  for (const Case& c : cases) {
    auto store = TokenStore::Open(Write(c.text));
    ASSERT_FALSE(store.ok()) << c.text;
    EXPECT_EQ(store.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(store.status().message(), HasSubstr(path_));
    EXPECT_THAT(store.status().message(), HasSubstr(c.want)) << c.text;
  }
  auto open = TokenStore::Open(Write("aaaaaaaaaaaaaaaa,alice,admin\n", 0644));
  EXPECT_EQ(open.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(TokenStore::Open(dir_.Sub("none")).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TokenStoreTest, ReloadsOnChangeAndOnRequestAndKeepsTokensWhenTheFileIsBad) {
  auto store = TokenStore::Open(Write("aaaaaaaaaaaaaaaa,alice,admin\n"));
  ASSERT_TRUE(store.ok());
  EXPECT_FALSE(*(*store)->MaybeReload());      // nothing changed
  Write("bbbbbbbbbbbbbbbbbbbb,bob,reader\n");  // another size: a change without a signal
  EXPECT_TRUE(*(*store)->MaybeReload());
  EXPECT_EQ((*store)->Find("aaaaaaaaaaaaaaaa"), nullptr);
  EXPECT_EQ((*store)->Find("bbbbbbbbbbbbbbbbbbbb")->name, "bob");
  EXPECT_EQ((*store)->reloads(), 1);
  RequestTokenReload();
  EXPECT_TRUE(*(*store)->MaybeReload());  // asked for, though the file did not change
  InstallTokenReloadSignal();
  ASSERT_EQ(::raise(SIGHUP), 0);  // the handler asks for a reload; the process lives on
  EXPECT_TRUE(*(*store)->MaybeReload());
  EXPECT_FALSE(*(*store)->MaybeReload());
  Write("this line is bad\n", 0644);  // refused for its mode: retried after the chmod
  EXPECT_FALSE((*store)->MaybeReload().ok());
  ASSERT_EQ(::chmod(path_.c_str(), 0600), 0);
  auto bad = (*store)->MaybeReload();
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("the previous ones stay in use"));
  EXPECT_EQ((*store)->Find("bbbbbbbbbbbbbbbbbbbb")->name, "bob");
  EXPECT_FALSE(*(*store)->MaybeReload());  // not retried until it changes again
}

}  // namespace
}  // namespace sift
