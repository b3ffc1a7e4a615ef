#include "common/kv_store.h"

#include <dirent.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift {
namespace {

std::unique_ptr<FileKvStore> OpenStore(const std::string& dir) {
  auto store = FileKvStore::Open(dir);
  EXPECT_TRUE(store.ok()) << store.status();
  return std::move(store).value();
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  ::closedir(d);
  return names;
}

TEST(FileKvStoreTest, SetThenGetReturnsTheBytes) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.Sub("kv/nested"));  // created with its parents
  const std::string binary("a\0b\xff\n", 5);
  ASSERT_TRUE(store->Set("job/0/rank_0", binary).ok());
  ASSERT_TRUE(store->Set("empty", "").ok());
  auto got = store->Get("job/0/rank_0", absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, binary);
  got = store->Get("empty", absl::Seconds(1));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "");
  // Last write wins.
  ASSERT_TRUE(store->Set("job/0/rank_0", "second").ok());
  EXPECT_EQ(*store->Get("job/0/rank_0", absl::Seconds(1)), "second");
  // A second store on the same directory (another process in real use) sees the same keys.
  auto other = OpenStore(tmp.Sub("kv/nested"));
  EXPECT_EQ(*other->Get("job/0/rank_0", absl::ZeroDuration()), "second");
  // No temp files are left behind.
  for (const std::string& name : ListDir(tmp.Sub("kv/nested"))) {
    EXPECT_NE(name[0], '.') << name;
  }
}

TEST(FileKvStoreTest, GetOfAMissingKeyTimesOut) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.path());
  auto got = store->Get("never/set", absl::Milliseconds(200));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded) << got.status();
  EXPECT_NE(got.status().message().find("never/set"), absl::string_view::npos) << got.status();
}

TEST(FileKvStoreTest, WaitTimesOutNamingOnlyTheMissingKeys) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.path());
  ASSERT_TRUE(store->Set("a", "1").ok());
  ASSERT_TRUE(store->Set("c", "3").ok());
  EXPECT_TRUE(store->Wait({"a", "c"}, absl::ZeroDuration()).ok());
  EXPECT_TRUE(store->Wait({}, absl::ZeroDuration()).ok());
  Status st = store->Wait({"a", "b", "c"}, absl::Milliseconds(200));
  ASSERT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded) << st;
  EXPECT_NE(st.message().find("'b'"), absl::string_view::npos) << st;
  EXPECT_EQ(st.message().find("'a'"), absl::string_view::npos) << st;
  EXPECT_NE(st.message().find("1 of 3"), absl::string_view::npos) << st;
}

TEST(FileKvStoreTest, GetAndWaitBlockUntilAnotherThreadSets) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.path());
  std::atomic<bool> waiter_done{false};
  std::thread waiter([&] {
    Status st = store->Wait({"x", "y"}, absl::Seconds(30));
    EXPECT_TRUE(st.ok()) << st;
    auto y = store->Get("y", absl::Seconds(30));
    ASSERT_TRUE(y.ok()) << y.status();
    EXPECT_EQ(*y, "why");
    waiter_done = true;
  });
  // Set one key, then the other only after making sure the waiter has not finished early.
  ASSERT_TRUE(store->Set("x", "ex").ok());
  EXPECT_FALSE(waiter_done.load());
  ASSERT_TRUE(store->Set("y", "why").ok());
  waiter.join();
  EXPECT_TRUE(waiter_done.load());
}

TEST(FileKvStoreTest, ReadersNeverSeeAPartialValue) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.path());
  // Values are one repeated letter with a length that depends on the letter: a torn read shows
  // up as mixed letters or a wrong length.
  auto value_for = [](int i) {
    const char c = static_cast<char>('a' + i % 26);
    return std::string(100000 + 7919 * (i % 26), c);
  };
  ASSERT_TRUE(store->Set("hot", value_for(0)).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> reads{0};
  std::atomic<int> bad{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        auto v = store->Get("hot", absl::Seconds(5));
        const bool whole = v.ok() && !v->empty() && *v == value_for((*v)[0] - 'a');
        EXPECT_TRUE(whole) << (v.ok() ? absl::StrCat("torn read of length ", v->size())
                                      : v.status().ToString());
        if (!whole) {
          ++bad;
          return;
        }
        ++reads;
      }
    });
  }
  // Two writers overwrite the key until the readers have read it 100 times (or failed).
  auto keep_writing = [&](int first) {
    for (int i = first; reads.load() < 100 && bad.load() == 0; i += 2) {
      Status st = store->Set("hot", value_for(i));
      EXPECT_TRUE(st.ok()) << st;
      if (!st.ok()) ++bad;
    }
  };
  std::thread writer2(keep_writing, 1);
  keep_writing(0);
  writer2.join();
  stop = true;
  for (auto& t : readers) t.join();
}

TEST(FileKvStoreTest, KeysWithOddCharactersAreEscapedAndDistinct) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.path());
  const std::vector<std::string> keys = {
      "../../etc/passwd",     ".",          "..",    "a/b", "a%2Fb", "a b\tc\n", "é",
      std::string("z\0y", 3), ".tmp.1.2.x", "A-z_09"};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store->Set(keys[i], absl::StrCat("v", i)).ok()) << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    auto v = store->Get(keys[i], absl::ZeroDuration());
    ASSERT_TRUE(v.ok()) << i << ": " << v.status();
    EXPECT_EQ(*v, absl::StrCat("v", i)) << i;
  }
  // Every key is one plain file directly in the directory, nothing escaped it.
  EXPECT_EQ(ListDir(tmp.path()).size(), keys.size());
  EXPECT_EQ(*FileKvStore::FileNameForKey("a/b"), "a%2Fb");
  EXPECT_EQ(*FileKvStore::FileNameForKey("a%2Fb"), "a%252Fb");
  EXPECT_EQ(*FileKvStore::FileNameForKey("A-z_09"), "A-z_09");
}

TEST(FileKvStoreTest, BadKeysAreRejected) {
  testing::TempDir tmp;
  auto store = OpenStore(tmp.path());
  EXPECT_EQ(store->Set("", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Get("", absl::ZeroDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  const std::string long_key(100, '/');  // escapes to 300 bytes: over the file-name limit
  Status st = store->Set(long_key, "x");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(store->Set(std::string(255, 'k'), "x").ok());
  EXPECT_EQ(FileKvStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace sift
