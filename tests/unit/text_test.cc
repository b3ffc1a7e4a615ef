#include "common/text.h"

#include <string>

#include "gtest/gtest.h"

namespace sift {
namespace {

TEST(TextTest, ValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // a surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xff\xfe"));
  EXPECT_FALSE(IsValidUtf8("\xe2\x82"));
}

TEST(TextTest, FindUnprintable) {
  EXPECT_EQ(FindUnprintable("ok\ttab \xc3\xa9"), absl::string_view::npos);
  EXPECT_EQ(FindUnprintable("a\nb"), 1u);
  EXPECT_EQ(FindUnprintable(std::string("ab\0c", 4)), 2u);
  EXPECT_EQ(FindUnprintable("abc\x7f"), 3u);
  EXPECT_EQ(FindUnprintable("ab\xff"), 2u);
}

TEST(TextTest, SanitizeKeepsCleanTextAndReplacesBadBytes) {
  EXPECT_EQ(SanitizeUtf8("clean \xc3\xa9", 100), "clean \xc3\xa9");
  EXPECT_EQ(SanitizeUtf8("a\xff"
                         "b",
                         100),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_EQ(SanitizeUtf8(std::string("a\0b", 3), 100),
            "a\xef\xbf\xbd"
            "b");
  EXPECT_TRUE(IsValidUtf8(SanitizeUtf8("\xed\xa0\x80\xc3", 100)));
}

TEST(TextTest, SanitizeBoundsTheLengthAtACharacterBoundary) {
  // Exactly the limit of clean text is kept whole.
  const std::string exact(200, 'x');
  EXPECT_EQ(SanitizeUtf8(exact, 200), exact);
  // Longer: cut, says how much, never over the limit, valid UTF-8 even when the cut falls in
  // a multi-byte character.
  std::string euros;
  for (int i = 0; i < 1000; ++i) euros += "\xe2\x82\xac";
  for (size_t limit : {64u, 65u, 66u, 200u, 1001u}) {
    const std::string out = SanitizeUtf8(euros, limit);
    EXPECT_LE(out.size(), limit);
    EXPECT_TRUE(IsValidUtf8(out));
    EXPECT_NE(out.find("bytes cut)"), std::string::npos) << out;
  }
  // Random bytes of any length come out valid and bounded.
  std::string junk;
  uint32_t x = 12345;
  for (int i = 0; i < 5000; ++i) {
    x = x * 1664525u + 1013904223u;
    junk.push_back(static_cast<char>(x >> 24));
  }
  const std::string out = SanitizeUtf8(junk, 4096);
  EXPECT_LE(out.size(), 4096u);
  EXPECT_TRUE(IsValidUtf8(out));
}

}  // namespace
}  // namespace sift
