// Fuzz target: feature_spec.yaml (common/data/feature_spec.h FeatureSpec::Parse).
//
// Input: the file's text. Invariants: errors are INVALID_ARGUMENT naming the file; an accepted
// spec answers its accessors, is accepted by the TFRecord import's layout when its history fits,
// and round-trips: Parse(ToYaml(spec)) succeeds and writes the same YAML again (what Save writes,
// Load reads back).
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "common/data/feature_spec.h"
#include "common/data/tfrecord_convert.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using sift::data::FeatureSpec;
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = FeatureSpec::Parse(text, "feature_spec.yaml");
  sift::fuzz::Note("parse", spec.status());
  if (!spec.ok()) {
    FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
               spec.status().ToString());
    FUZZ_CHECK(absl::StartsWith(spec.status().message(), "feature_spec.yaml"),
               spec.status().ToString());
    return 0;
  }
  FUZZ_CHECK(spec->Validate("feature_spec.yaml").ok(), "a parsed spec is valid");
  const auto cards = spec->TableCardinalities();
  FUZZ_CHECK(
      static_cast<int>(cards.size()) == spec->num_user_features() + spec->num_item_features(),
      "one table per user and item feature");
  for (int64_t c : cards) FUZZ_CHECK(c > 0, "positive cardinalities");
  const int64_t history = spec->HistoryLength();
  FUZZ_CHECK(history >= 1 && history <= sift::data::kMaxHistoryLength, "history length");
  FUZZ_CHECK(!spec->SourceType("train").empty() && !spec->SourceType("test").empty(),
             "both splits have a source type");
  auto decoder = sift::data::TfExampleDecoder::Create(*spec, "feature_spec.yaml");
  FUZZ_CHECK(decoder.ok(), decoder.status().ToString());

  const std::string yaml = spec->ToYaml();
  auto again = FeatureSpec::Parse(yaml, "feature_spec.yaml");
  FUZZ_CHECK(again.ok(), again.status().ToString() + "\n--- written:\n" + yaml);
  FUZZ_CHECK(again->ToYaml() == yaml, "ToYaml is stable:\n" + yaml + "\n---\n" + again->ToYaml());
  return 0;
}
