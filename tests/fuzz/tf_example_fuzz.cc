// Fuzz target: tf.train.Example decoding of the TFRecord import (common/data/tfrecord_convert.h
// TfExampleDecoder) — protobuf's parser, then sift's checks of features, lengths and ids.
//
// Input: one byte choosing the feature_spec layout (the reference's history 100 with the
// cardinalities of a generated dataset, so real exported records are valid seeds; or small
// histories of 3 and 1 slots, where mutations find valid samples quickly), then the serialized
// Example. Invariants of an accepted Example: whole records, labels 0/1, history lengths within
// [0, T], every id within [0, cardinality], and padding only before the valid history suffix.
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/feature_spec.h"
#include "common/data/tfrecord_convert.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using sift::data::FeatureSpec;
using sift::data::TfExampleDecoder;

struct Layout {
  FeatureSpec spec;
  TfExampleDecoder decoder;
};

Layout MakeLayout(const std::vector<int64_t>& users, const std::vector<int64_t>& items,
                  int64_t history) {
  FeatureSpec spec = FeatureSpec::Reference(users, items, history);
  auto decoder = TfExampleDecoder::Create(spec, "feature_spec.yaml");
  FUZZ_CHECK(decoder.ok(), decoder.status().ToString());
  return Layout{std::move(spec), *std::move(decoder)};
}

const std::vector<Layout>& Layouts() {
  static const auto* layouts = new std::vector<Layout>{
      MakeLayout({1000000}, {1000000, 100000}, 100),
      MakeLayout({5}, {9, 4}, 3),
      MakeLayout({7}, {6}, 1),
  };
  return *layouts;
}

void CheckRecord(const Layout& l, const int32_t* r) {
  const auto shape = l.decoder.shape();
  const int64_t T = shape.history;
  const int UF = shape.user_features, F = shape.item_features;
  const std::vector<int64_t> card = l.spec.TableCardinalities();
  FUZZ_CHECK(r[0] == 0 || r[0] == 1, "label");
  FUZZ_CHECK(r[1] >= 0 && r[1] <= T, "history length");
  for (int k = 0; k < UF; ++k) FUZZ_CHECK(r[2 + k] >= 0 && r[2 + k] <= card[k], "user id");
  const int32_t* target = r + 2 + UF;
  for (int f = 0; f < F; ++f) {
    const int64_t c = card[UF + f];
    FUZZ_CHECK(target[f] >= 0 && target[f] <= c, "target id");
    for (const int32_t* h : {target + F + f * T, target + F + (F + f) * T}) {
      for (int64_t j = 0; j < T; ++j) {
        FUZZ_CHECK(h[j] >= 0 && h[j] <= c, "history id");
        if (j < T - r[1]) FUZZ_CHECK(h[j] == 0, "padding before the valid suffix");
      }
    }
  }
  // The first positive-history feature defines the valid suffix: its slots there are ids.
  const int32_t* pos0 = target + F;
  for (int64_t j = T - r[1]; j < T; ++j) FUZZ_CHECK(pos0[j] != 0, "a hole in the valid suffix");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::QuietProtobuf();
  sift::fuzz::Input in(data, size);
  const Layout& l = Layouts()[in.Byte() % Layouts().size()];
  const absl::string_view payload = in.Rest();
  std::vector<int32_t> records;
  const sift::Status s = l.decoder.Decode(payload, "part_0.tfrecord", 0, 0, &records);
  sift::fuzz::Note("decode", s);
  if (!s.ok()) {
    FUZZ_CHECK(s.code() == absl::StatusCode::kInvalidArgument, s.ToString());
    FUZZ_CHECK(!s.message().empty(), "an error says something");
    return 0;
  }
  const size_t R = static_cast<size_t>(l.decoder.shape().record_ints());
  FUZZ_CHECK(!records.empty() && records.size() % R == 0, "whole records");
  for (size_t i = 0; i < records.size(); i += R) CheckRecord(l, records.data() + i);
  return 0;
}
