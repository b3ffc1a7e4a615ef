#include "common/data/py_literal.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift::data {
namespace {

using Kind = PyValue::Kind;
using ::testing::HasSubstr;
using ::testing::StartsWith;

PyValue Parse(const std::string& text) {
  StatusOr<PyValue> v = ParsePyLiteral(text);
  EXPECT_TRUE(v.ok()) << text << " -> " << v.status();
  return v.ok() ? *v : PyValue();
}

std::string Str(const std::string& text) {
  PyValue v = Parse(text);
  EXPECT_EQ(v.kind, Kind::kString) << text;
  return v.str;
}

// The error message of a literal that must not parse.
std::string Error(const std::string& text) {
  StatusOr<PyValue> v = ParsePyLiteral(text);
  EXPECT_FALSE(v.ok()) << text << " parsed";
  if (v.ok()) return "";
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(v.status().message());
}

TEST(PyLiteral, StringsWithBothQuoteStyles) {
  EXPECT_EQ(Str("'abc'"), "abc");
  EXPECT_EQ(Str("\"abc\""), "abc");
  EXPECT_EQ(Str("''"), "");
  EXPECT_EQ(Str("\"it's\""), "it's");
  EXPECT_EQ(Str("'say \"hi\"'"), "say \"hi\"");
  EXPECT_EQ(Str(R"('it\'s')"), "it's");
  EXPECT_EQ(Str(R"("a\"b")"), "a\"b");
  EXPECT_EQ(Str(R"('a\\b')"), "a\\b");
  EXPECT_EQ(Str("'a' \"b\" 'c'"), "abc");  // adjacent literals concatenate
  EXPECT_EQ(Str("'''tri'ple'''"), "tri'ple");
  EXPECT_EQ(Str("u'unicode'"), "unicode");
}

TEST(PyLiteral, Escapes) {
  EXPECT_EQ(Str(R"('\n\t\r\a\b\f\v')"), "\n\t\r\a\b\f\v");
  EXPECT_EQ(Str(R"('\x41\x7a')"), "Az");
  // An escape is a code point, encoded in UTF-8 (Python 3 semantics: '\xe9' == 'é').
  EXPECT_EQ(Str(R"('caf\xe9')"), "caf\xc3\xa9");
  EXPECT_EQ(Str(R"('caf\u00e9')"), "caf\xc3\xa9");
  EXPECT_EQ(Str("'caf\xc3\xa9'"), "caf\xc3\xa9");  // raw UTF-8 copied unchanged
  EXPECT_EQ(Str(R"('\u20ac')"), "\xe2\x82\xac");
  EXPECT_EQ(Str(R"('\U0001F600')"), "\xf0\x9f\x98\x80");
  EXPECT_EQ(Str(R"('\101\0')"), std::string("A\0", 2));
  EXPECT_EQ(Str(R"('\d')"), "\\d");  // unknown escapes keep the backslash, as in Python
  EXPECT_EQ(Str(R"(r'\n\'')"), "\\n\\'");
  // U+2028 inside a string is an ordinary character.
  EXPECT_EQ(Str("'a\xe2\x80\xa8z'"), "a\xe2\x80\xa8z");
  PyValue b = Parse(R"(b'\xff\u')");
  EXPECT_EQ(b.kind, Kind::kBytes);
  EXPECT_EQ(b.str, "\xff\\u");
}

TEST(PyLiteral, Scalars) {
  EXPECT_EQ(Parse("True").kind, Kind::kBool);
  EXPECT_TRUE(Parse("True").bool_value);
  EXPECT_FALSE(Parse("False").bool_value);
  EXPECT_EQ(Parse("None").kind, Kind::kNone);
  EXPECT_EQ(Parse("42").int_value, 42);
  EXPECT_EQ(Parse("-42").int_value, -42);
  EXPECT_EQ(Parse("+ 7").int_value, 7);
  EXPECT_EQ(Parse("0").int_value, 0);
  EXPECT_EQ(Parse("1_000").int_value, 1000);
  EXPECT_EQ(Parse("0x1F").int_value, 31);
  EXPECT_EQ(Parse("0o17").int_value, 15);
  EXPECT_EQ(Parse("0b101").int_value, 5);
  EXPECT_EQ(Parse("9223372036854775807").int_value, INT64_MAX);
  EXPECT_EQ(Parse("-9223372036854775808").int_value, INT64_MIN);
  EXPECT_EQ(Parse("3.17").kind, Kind::kFloat);
  EXPECT_DOUBLE_EQ(Parse("3.17").float_value, 3.17);
  EXPECT_DOUBLE_EQ(Parse("-.5").float_value, -0.5);
  EXPECT_DOUBLE_EQ(Parse("5.").float_value, 5.0);
  EXPECT_DOUBLE_EQ(Parse("1e3").float_value, 1000.0);
  EXPECT_DOUBLE_EQ(Parse("2.5E-2").float_value, 0.025);
  EXPECT_TRUE(std::isinf(Parse("1e999").float_value));
  EXPECT_EQ(Parse("1e-999").float_value, 0.0);
  EXPECT_EQ(Parse("  12  ").int_value, 12);
}

TEST(PyLiteral, NestedContainers) {
  PyValue v = Parse("{'a': [1, (2, 3), {'b': ()}], 'c': (4,), 'd': {1, 2}, (5, 'x'): [],}");
  ASSERT_EQ(v.kind, Kind::kDict);
  ASSERT_EQ(v.entries.size(), 4u);
  const PyValue* a = v.Find("a");
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(a->kind, Kind::kList);
  ASSERT_EQ(a->items.size(), 3u);
  EXPECT_EQ(a->items[0].int_value, 1);
  EXPECT_EQ(a->items[1].kind, Kind::kTuple);
  EXPECT_EQ(a->items[1].items[1].int_value, 3);
  ASSERT_EQ(a->items[2].kind, Kind::kDict);
  EXPECT_EQ(a->items[2].Find("b")->kind, Kind::kTuple);
  EXPECT_TRUE(a->items[2].Find("b")->items.empty());
  const PyValue* c = v.Find("c");
  ASSERT_EQ(c->kind, Kind::kTuple);
  ASSERT_EQ(c->items.size(), 1u);
  EXPECT_EQ(v.Find("d")->kind, Kind::kSet);
  EXPECT_EQ(v.Find("d")->items.size(), 2u);
  EXPECT_EQ(v.entries[3].first.kind, Kind::kTuple);
  EXPECT_EQ(v.Find("missing"), nullptr);
  // (x) is x; [] and {} are empty.
  EXPECT_EQ(Parse("('x')").kind, Kind::kString);
  EXPECT_EQ(Parse("[]").kind, Kind::kList);
  EXPECT_EQ(Parse("{}").kind, Kind::kDict);
  EXPECT_EQ(Parse("[[[[]]]]").items[0].items[0].items[0].kind, Kind::kList);
  // A bare top-level tuple, and comments, as eval reads them.
  PyValue bare = Parse("1, 'a',");
  ASSERT_EQ(bare.kind, Kind::kTuple);
  EXPECT_EQ(bare.items.size(), 2u);
  EXPECT_EQ(Parse("[1,  # one\n 2]  # done").items.size(), 2u);
  // Duplicate keys: the last one wins, as in Python.
  EXPECT_EQ(Parse("{'k': 1, 'k': 2}").Find("k")->int_value, 2);
}

TEST(PyLiteral, ErrorsReportTheColumn) {
  EXPECT_THAT(Error("'abc"), StartsWith("column 1: unterminated string"));
  EXPECT_THAT(Error("[1, 2"), StartsWith("column 6: unterminated list"));
  EXPECT_THAT(Error("[1 2]"), StartsWith("column 4: expected ',' or ']'"));
  EXPECT_THAT(Error("{'a' 1}"), StartsWith("column 6: expected ',' or '}' in a set"));
  EXPECT_THAT(Error("{'a': 1, 'b' 1}"), StartsWith("column 14: expected ':'"));
  EXPECT_THAT(Error("[1, true]"), StartsWith("column 5: unexpected name 'true'"));
  EXPECT_THAT(Error("{'a': 1} x"), StartsWith("column 10: unexpected 'x' after the end"));
  EXPECT_THAT(Error("'\\x4'"), StartsWith("column 2: truncated \\x escape"));
  EXPECT_THAT(Error("'\\u12'"), StartsWith("column 2: truncated \\u escape"));
  EXPECT_THAT(Error("'\\U00110000'"), StartsWith("column 2: escape beyond the Unicode range"));
  EXPECT_THAT(Error("[1, 0123]"), StartsWith("column 5: leading zeros"));
  EXPECT_THAT(Error("1_"), StartsWith("column 1: invalid number"));
  EXPECT_THAT(Error("10L"), StartsWith("column 1: invalid number"));
  EXPECT_THAT(Error("--1"), StartsWith("column 1: expected a number after the sign"));
  EXPECT_THAT(Error("1j"), StartsWith("column 1: complex numbers are not supported"));
  EXPECT_THAT(Error("9223372036854775808"), StartsWith("column 1: integer out of the int64"));
  EXPECT_THAT(Error("{[1]: 2}"), StartsWith("column 2: unhashable type 'list'"));
  EXPECT_THAT(Error("{'a': 1, (1, [2]): 2}"), StartsWith("column 10: unhashable type 'list'"));
  EXPECT_THAT(Error("{1, {}}"), StartsWith("column 5: unhashable type 'dict'"));
  EXPECT_THAT(Error("f'x'"), StartsWith("column 1: invalid string prefix 'f'"));
  EXPECT_THAT(Error("'a' b'b'"), StartsWith("column 5: cannot mix bytes and str"));
  EXPECT_THAT(Error("b'\xc3\xa9'"), StartsWith("column 3: bytes literals may hold only ASCII"));
  EXPECT_THAT(Error(""), StartsWith("column 1: unexpected end of input"));
  EXPECT_THAT(Error("[1,,2]"), StartsWith("column 4: unexpected ','"));
  EXPECT_THAT(Error("@"), StartsWith("column 1: unexpected '@'"));
  EXPECT_THAT(Error("'a\nb'"), StartsWith("column 1: unterminated string"));
  EXPECT_THAT(Error(std::string(kMaxPyDepth + 5, '[')), HasSubstr("nesting deeper than"));
}

constexpr char kMetaLine[] =
    "{'asin': '0000031852', 'title': 'Girls Ballet Tutu Zebra Hot Pink', 'price': 3.17, "
    "'imUrl': 'http://ecx.images-amazon.com/images/I/51fAmVkTbyL._SY300_.jpg', 'related': "
    "{'also_bought': ['B00JHONN1S', 'B002BZX8Z6']}, 'salesRank': {'Toys & Games': 211836}, "
    "'categories': [['Sports & Outdoors', 'Other Sports', 'Dance']]}";

TEST(PyLiteral, RealMetadataLine) {
  PyValue v = Parse(kMetaLine);
  ASSERT_EQ(v.kind, Kind::kDict);
  EXPECT_EQ(v.entries.size(), 7u);
  EXPECT_EQ(v.Find("asin")->str, "0000031852");
  EXPECT_DOUBLE_EQ(v.Find("price")->float_value, 3.17);
  EXPECT_EQ(v.Find("salesRank")->Find("Toys & Games")->int_value, 211836);
  EXPECT_EQ(v.Find("related")->Find("also_bought")->items[1].str, "B002BZX8Z6");
  const PyValue* cats = v.Find("categories");
  ASSERT_NE(cats, nullptr);
  ASSERT_EQ(cats->items.size(), 1u);
  ASSERT_EQ(cats->items[0].items.size(), 3u);
  EXPECT_EQ(cats->items[0].items.back().str, "Dance");
}

TEST(PyLiteral, DictFieldsKeepsOnlyTheAskedKeys) {
  const std::vector<std::string> keys = {"asin", "categories"};
  StatusOr<PyValue> v = ParsePyDictFields(kMetaLine, keys);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ(v->entries.size(), 2u);
  EXPECT_EQ(v->Find("asin")->str, "0000031852");
  EXPECT_EQ(v->Find("categories")->items[0].items[2].str, "Dance");
  EXPECT_EQ(v->Find("price"), nullptr);
  // Skipped values are still checked, with the same columns.
  const std::string bad = "{'asin': 'x', 'related': {'also': ['a' 'b', 3 4]}}";
  StatusOr<PyValue> e = ParsePyDictFields(bad, keys);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), StartsWith("column 47: expected ',' or ']'"));
  EXPECT_EQ(ParsePyLiteral(bad).status().message(), e.status().message());
  StatusOr<PyValue> unhashable = ParsePyDictFields("{'a': {(1, [2]): 3}}", keys);
  EXPECT_THAT(std::string(unhashable.status().message()),
              StartsWith("column 8: unhashable type 'list'"));
  // Only a dict will do.
  EXPECT_THAT(std::string(ParsePyDictFields("['asin']", keys).status().message()),
              StartsWith("column 1: expected a dict literal"));
  EXPECT_THAT(std::string(ParsePyDictFields("{'asin', 'b'}", keys).status().message()),
              StartsWith("column 8: expected ':' after a dict key"));
  // A big integer in a skipped value is fine (Python ints are unbounded).
  StatusOr<PyValue> big = ParsePyDictFields("{'asin': 'a', 'n': 123456789012345678901234}", keys);
  EXPECT_TRUE(big.ok()) << big.status();
}

}  // namespace
}  // namespace sift::data
