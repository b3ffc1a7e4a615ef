// TFRecord framing: known bytes, writer -> reader round trips, and every corruption the reader
// must report (bad length CRC, bad data CRC, truncation) with file, record number and offset.
#include "common/data/tfrecord.h"

#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::data {
namespace {

using ::testing::HasSubstr;

// Expected bytes computed independently with this pure-Python CRC32C (no library):
//
//   import struct
//   def crc32c(data):
//       crc = 0xffffffff
//       for b in data:
//           crc ^= b
//           for _ in range(8):
//               crc = (crc >> 1) ^ (0x82f63b78 if crc & 1 else 0)
//       return crc ^ 0xffffffff
//   def mask(c): return ((((c >> 15) | (c << 17)) & 0xffffffff) + 0xa282ead8) & 0xffffffff
//   def frame(p):
//       h = struct.pack('<Q', len(p))
//       return h + struct.pack('<I', mask(crc32c(h))) + p + struct.pack('<I', mask(crc32c(p)))
//   print(frame(b'hello').hex()); print(frame(b'').hex())
constexpr char kHelloFramedHex[] = "0500000000000000eab2043e68656c6c6fbb1f1c19";
constexpr char kEmptyFramedHex[] = "000000000000000029039807d8ea82a2";

std::string Hex(const std::string& s) { return absl::BytesToHexString(s); }

TEST(TfRecordFraming, KnownVectors) {
  std::string out;
  AppendTfRecord("hello", &out);
  EXPECT_EQ(Hex(out), kHelloFramedHex);
  out.clear();
  AppendTfRecord("", &out);
  EXPECT_EQ(Hex(out), kEmptyFramedHex);
}

TEST(TfRecordFraming, ReaderAcceptsKnownBytes) {
  testing::TempDir tmp;
  const std::string path = tmp.Sub("known.tfrecord");
  testing::WriteAll(path, absl::HexStringToBytes(std::string(kHelloFramedHex) + kEmptyFramedHex));
  auto r = TfRecordReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  absl::string_view payload;
  auto next = r->Next(&payload);
  ASSERT_TRUE(next.ok()) << next.status();
  ASSERT_TRUE(*next);
  EXPECT_EQ(payload, "hello");
  next = r->Next(&payload);
  ASSERT_TRUE(next.ok() && *next);
  EXPECT_EQ(payload, "");
  next = r->Next(&payload);
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(*next);
  EXPECT_EQ(r->record_index(), 2);
}

std::vector<std::string> SamplePayloads() {
  std::vector<std::string> p = {"", "a", std::string(1000, '\0'), "tf.train.Example"};
  std::string big;
  for (int i = 0; i < 70000; ++i) big.push_back(static_cast<char>((i * 131 + 7) & 0xff));
  p.push_back(big);
  return p;
}

std::string WriteRecords(const std::string& path, const std::vector<std::string>& payloads) {
  TfRecordWriter w;
  EXPECT_TRUE(w.Open(path).ok());
  for (const auto& p : payloads) EXPECT_TRUE(w.Write(p).ok());
  EXPECT_EQ(w.records(), static_cast<int64_t>(payloads.size()));
  EXPECT_TRUE(w.Commit().ok());
  return testing::ReadAll(path);
}

// Reads every record; returns the payloads and the status that ended the walk.
Status ReadRecords(const std::string& path, std::vector<std::string>* out) {
  SIFT_ASSIGN_OR_RETURN(TfRecordReader r, TfRecordReader::Open(path));
  absl::string_view payload;
  for (;;) {
    SIFT_ASSIGN_OR_RETURN(bool more, r.Next(&payload));
    if (!more) return absl::OkStatus();
    out->emplace_back(payload);
  }
}

TEST(TfRecordFraming, WriterReaderRoundTrip) {
  testing::TempDir tmp;
  const std::string path = tmp.Sub("rt.tfrecord");
  const auto payloads = SamplePayloads();
  const std::string bytes = WriteRecords(path, payloads);
  size_t expected = 0;
  for (const auto& p : payloads) expected += p.size() + kTfRecordOverhead;
  EXPECT_EQ(bytes.size(), expected);

  std::vector<std::string> got;
  ASSERT_TRUE(ReadRecords(path, &got).ok());
  EXPECT_EQ(got, payloads);

  // WriteFramed of AppendTfRecord output gives the same bytes as Write.
  std::string framed;
  for (const auto& p : payloads) AppendTfRecord(p, &framed);
  EXPECT_EQ(framed, bytes);
}

TEST(TfRecordFraming, EmptyFileHasNoRecords) {
  testing::TempDir tmp;
  const std::string path = tmp.Sub("empty.tfrecord");
  WriteRecords(path, {});
  std::vector<std::string> got;
  ASSERT_TRUE(ReadRecords(path, &got).ok());
  EXPECT_TRUE(got.empty());
}

TEST(TfRecordFraming, MissingFileIsAnError) {
  testing::TempDir tmp;
  auto r = TfRecordReader::Open(tmp.Sub("nope.tfrecord"));
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("nope.tfrecord"));
}

// Writes `bytes` to a file, reads it and returns the error (after `ok_records` good records).
std::string CorruptionError(const std::string& bytes, int ok_records) {
  testing::TempDir tmp;
  const std::string path = tmp.Sub("bad.tfrecord");
  testing::WriteAll(path, bytes);
  std::vector<std::string> got;
  Status s = ReadRecords(path, &got);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(static_cast<int>(got.size()), ok_records);
  std::string msg(s.message());
  EXPECT_THAT(msg, HasSubstr("bad.tfrecord"));
  return msg;
}

class TfRecordCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* p : {"first", "second record", "third"}) AppendTfRecord(p, &good_);
    // Record 1 ("second record", 13 bytes) starts after record 0 (5 + 16 bytes).
    offset1_ = 5 + kTfRecordOverhead;
  }
  std::string good_;
  size_t offset1_ = 0;
};

TEST_F(TfRecordCorruption, BadLengthCrc) {
  std::string bytes = good_;
  bytes[offset1_ + 9] ^= 0x01;  // inside the length CRC
  std::string msg = CorruptionError(bytes, 1);
  EXPECT_THAT(msg, HasSubstr("record 1 at byte offset 21"));
  EXPECT_THAT(msg, HasSubstr("bad length CRC"));
}

TEST_F(TfRecordCorruption, CorruptLengthIsCaughtByLengthCrc) {
  std::string bytes = good_;
  bytes[offset1_ + 0] ^= 0x40;  // the length itself: its CRC no longer matches
  EXPECT_THAT(CorruptionError(bytes, 1), HasSubstr("bad length CRC"));
}

TEST_F(TfRecordCorruption, BadDataCrc) {
  std::string bytes = good_;
  bytes[offset1_ + 12 + 3] ^= 0x20;  // a payload byte
  std::string msg = CorruptionError(bytes, 1);
  EXPECT_THAT(msg, HasSubstr("record 1 at byte offset 21"));
  EXPECT_THAT(msg, HasSubstr("bad data CRC"));
  bytes = good_;
  bytes[offset1_ + 12 + 13 + 2] ^= 0x01;  // the data CRC itself
  EXPECT_THAT(CorruptionError(bytes, 1), HasSubstr("bad data CRC"));
}

TEST_F(TfRecordCorruption, TruncatedInEveryPart) {
  const size_t end1 = offset1_ + 13 + kTfRecordOverhead;
  // Cut inside the header, inside the payload, inside the data CRC of record 1.
  for (size_t cut : {offset1_ + 5, offset1_ + 12 + 4, end1 - 1}) {
    std::string msg = CorruptionError(good_.substr(0, cut), 1);
    EXPECT_THAT(msg, HasSubstr("record 1 at byte offset 21")) << "cut " << cut;
    EXPECT_THAT(msg, HasSubstr("truncated")) << "cut " << cut;
  }
  // A cut exactly between records is a clean end.
  testing::TempDir tmp;
  testing::WriteAll(tmp.Sub("f"), good_.substr(0, end1));
  std::vector<std::string> got;
  EXPECT_TRUE(ReadRecords(tmp.Sub("f"), &got).ok());
  EXPECT_EQ(got.size(), 2u);
}

TEST_F(TfRecordCorruption, HugeLengthWithValidCrcIsTruncation) {
  // After one good record, a header claiming 2^40 payload bytes with a correct length CRC: the
  // reader must report truncation, not read out of bounds.
  std::string bytes;
  AppendTfRecord("x", &bytes);
  std::string header(8, '\0');
  header[5] = 1;  // little-endian 2^40
  const uint32_t masked = MaskCrc32c(Crc32c(header.data(), header.size()));
  for (int i = 0; i < 4; ++i) header.push_back(static_cast<char>((masked >> (8 * i)) & 0xff));
  bytes += header + "some bytes";
  std::string msg = CorruptionError(bytes, 1);
  EXPECT_THAT(msg, HasSubstr("record 1 at byte offset 17"));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

}  // namespace
}  // namespace sift::data
