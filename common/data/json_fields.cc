#include "common/data/json_fields.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace sift::data {
namespace {

// nlohmann's messages quote the last token read, which can be a whole review text.
constexpr size_t kMaxMessageBytes = 240;

class PickSax {
 public:
  using json = nlohmann::json;
  using Kind = JsonField::Kind;
  PickSax(const std::vector<std::string>* keys, std::vector<JsonField>* fields)
      : keys_(keys), fields_(fields) {}

  const std::string& error() const { return error_; }

  bool null() { return Put(Kind::kNull, ""); }
  bool boolean(bool v) { return Put(Kind::kBool, v ? "true" : "false"); }
  bool number_integer(json::number_integer_t v) {
    if (JsonField* f = Scalar(Kind::kInteger, absl::StrCat(v))) f->integer = v;
    return !failed_;
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (JsonField* f = Scalar(Kind::kUnsigned, absl::StrCat(v))) f->unsigned_value = v;
    return !failed_;
  }
  bool number_float(json::number_float_t, const json::string_t& raw) {
    return Put(Kind::kFloat, raw);
  }
  bool string(json::string_t& s) { return Put(Kind::kString, std::move(s)); }
  bool binary(json::binary_t&) { return Put(Kind::kBinary, ""); }
  bool start_object(std::size_t) { return Open(Kind::kObject); }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) { return Open(Kind::kArray); }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) {
      field_ = -1;
      for (size_t f = 0; f < keys_->size(); ++f) {
        if (k == (*keys_)[f]) field_ = static_cast<int>(f);
      }
    }
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    std::string what = ex.what();
    // Drop the "[json.exception.parse_error.101] " prefix.
    const size_t close = what.find("] ");
    if (what.rfind("[json.exception", 0) == 0 && close != std::string::npos) {
      what = what.substr(close + 2);
    }
    if (what.size() > kMaxMessageBytes) what = what.substr(0, kMaxMessageBytes) + "...";
    error_ = "invalid JSON: " + what;
    return false;
  }

 private:
  bool Put(Kind kind, std::string text) {
    Scalar(kind, std::move(text));
    return !failed_;
  }
  // Records a scalar at the top level of the object under a wanted key; returns its field (null
  // otherwise). A scalar where the object should be fails the parse.
  JsonField* Scalar(Kind kind, std::string text) {
    if (depth_ == 0) {
      error_ = absl::StrCat("expected a JSON object, got ", JsonKindName(kind));
      failed_ = true;
      return nullptr;
    }
    if (depth_ != 1 || field_ < 0) return nullptr;
    JsonField& f = (*fields_)[field_];
    f = JsonField();
    f.kind = kind;
    f.text = std::move(text);
    return &f;
  }
  bool Open(Kind kind) {
    if (depth_ == 0 && kind == Kind::kArray) {
      error_ = "expected a JSON object, got an array";
      return false;
    }
    if (depth_ == 1 && field_ >= 0) {
      (*fields_)[field_] = JsonField();
      (*fields_)[field_].kind = kind;
    }
    ++depth_;
    return true;
  }

  const std::vector<std::string>* keys_;
  std::vector<JsonField>* fields_;
  int depth_ = 0, field_ = -1;
  bool failed_ = false;
  std::string error_;
};

}  // namespace

const char* JsonKindName(JsonField::Kind kind) {
  switch (kind) {
    case JsonField::Kind::kAbsent:
      return "nothing";
    case JsonField::Kind::kNull:
      return "null";
    case JsonField::Kind::kBool:
      return "a boolean";
    case JsonField::Kind::kInteger:
    case JsonField::Kind::kUnsigned:
      return "an integer";
    case JsonField::Kind::kFloat:
      return "a float";
    case JsonField::Kind::kString:
      return "a string";
    case JsonField::Kind::kBinary:
      return "binary data";
    case JsonField::Kind::kObject:
      return "an object";
    case JsonField::Kind::kArray:
      return "an array";
  }
  return "?";
}

Status PickJsonFields(absl::string_view line, const std::vector<std::string>& keys,
                      std::vector<JsonField>* fields) {
  fields->assign(keys.size(), JsonField());
  PickSax sax(&keys, fields);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(line.begin(), line.end(), &sax);
  } catch (const nlohmann::json::exception& e) {
    std::string what = absl::StrCat("invalid JSON: ", e.what());
    if (what.size() > kMaxMessageBytes) what = what.substr(0, kMaxMessageBytes) + "...";
    return absl::InvalidArgumentError(what);
  }
  if (!ok) return absl::InvalidArgumentError(sax.error().empty() ? "invalid JSON" : sax.error());
  return Status();
}

}  // namespace sift::data
