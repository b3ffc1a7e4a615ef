// Test helpers for the embedding server's messages: building Pull/Push requests from plain vectors
// and checking an error's code and message parts. Header-only; shared by the shard unit tests and
// the gRPC integration tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/status.h"
#include "common/wire_float.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/embedding.pb.h"

namespace sift::testing {

// The status has `code` and its message contains every one of `parts`.
inline void ExpectError(const Status& s, absl::StatusCode code,
                        const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), code) << s;
  for (const std::string& p : parts) {
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr(p));
  }
}

struct Keys {
  uint32_t table;
  std::vector<uint64_t> keys;
};

inline embedding::v1::PullRequest PullReq(
    const std::vector<Keys>& tables, bool create_missing = true,
    embedding::v1::RowEncoding encoding = embedding::v1::ROW_ENCODING_FP32) {
  embedding::v1::PullRequest r;
  r.set_create_missing(create_missing);
  r.set_encoding(encoding);
  for (const Keys& k : tables) {
    embedding::v1::TableKeys* t = r.add_tables();
    t->set_table_id(k.table);
    for (uint64_t key : k.keys) t->add_keys(key);
  }
  return r;
}

struct Grads {
  uint32_t table;
  std::vector<uint64_t> keys;
  std::vector<float> grads;
};

// Gradients are encoded in `encoding` (fp16/bf16 round them).
inline embedding::v1::PushRequest PushReq(
    const std::vector<Grads>& tables, int64_t step = 1,
    embedding::v1::RowEncoding encoding = embedding::v1::ROW_ENCODING_FP32) {
  embedding::v1::PushRequest r;
  r.set_step(step);
  r.set_encoding(encoding);
  for (const Grads& g : tables) {
    embedding::v1::TableGradients* t = r.add_tables();
    t->set_table_id(g.table);
    for (uint64_t key : g.keys) t->add_keys(key);
    EncodeFloats(static_cast<WireFloat>(encoding), g.grads, t->mutable_gradients());
  }
  return r;
}

}  // namespace sift::testing
