#include "common/data/samples_file.h"

namespace sift::data {
namespace {
constexpr char kSamplesMagic[] = "SIFTSMPL";

std::array<uint64_t, 3> Counts(int64_t n, const SampleRecordShape& s) {
  return {static_cast<uint64_t>(n), static_cast<uint64_t>(s.history),
          static_cast<uint64_t>(s.item_features) | (static_cast<uint64_t>(s.user_features) << 32)};
}
}  // namespace

Status SamplesFileWriter::Begin(const std::string& path, const SampleRecordShape& shape) {
  shape_ = shape;
  count_ = 0;
  SIFT_RETURN_IF_ERROR(out_.Begin(path, kSamplesMagic, Counts(0, shape)));
  return out_.Section(nullptr, 0);
}

Status SamplesFileWriter::Add(const int32_t* record) {
  ++count_;
  return out_.Append(record, static_cast<uint64_t>(shape_.record_ints()) * sizeof(int32_t));
}

Status SamplesFileWriter::Finish() {
  out_.SetCounts(Counts(count_, shape_));
  return out_.Finish();
}

StatusOr<std::unique_ptr<SamplesFile>> SamplesFile::Open(const std::string& path, bool verify) {
  std::unique_ptr<SamplesFile> f(new SamplesFile());
  SIFT_ASSIGN_OR_RETURN(f->file_, BinaryFile::Open(path, kSamplesMagic, verify));
  const auto& c = f->file_.header().counts;
  const uint64_t history = c[1], item_features = c[2] & 0xffffffffu, user_features = c[2] >> 32;
  if (history == 0 || history > (1u << 20) || item_features == 0 || item_features > 64 ||
      user_features > 64) {
    return absl::DataLossError(absl::StrCat(path, ": implausible record shape in the header"));
  }
  f->shape_.history = static_cast<int64_t>(history);
  f->shape_.item_features = static_cast<int>(item_features);
  f->shape_.user_features = static_cast<int>(user_features);
  f->size_ = static_cast<int64_t>(c[0]);
  SectionReader r(f->file_);
  SIFT_ASSIGN_OR_RETURN(
      const uint8_t* p,
      r.NextArray(c[0], sizeof(int32_t), static_cast<uint64_t>(f->shape_.record_ints())));
  f->records_ = reinterpret_cast<const int32_t*>(p);
  if (verify) SIFT_RETURN_IF_ERROR(f->Verify());
  return f;
}

Status SamplesFile::Verify() const {
  SIFT_RETURN_IF_ERROR(file_.VerifyPayload());
  for (int64_t i = 0; i < size_; ++i) {
    const int32_t* r = record(i);
    if (r[0] != 0 && r[0] != 1) {
      return absl::DataLossError(
          absl::StrCat(file_.path(), ": record ", i, ": label ", r[0], " is not 0 or 1"));
    }
    if (r[1] < 0 || r[1] > shape_.history) {
      return absl::DataLossError(absl::StrCat(file_.path(), ": record ", i, ": history length ",
                                              r[1], " outside [0, ", shape_.history, "]"));
    }
  }
  return absl::OkStatus();
}

}  // namespace sift::data
