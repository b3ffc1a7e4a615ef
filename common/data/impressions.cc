#include "common/data/impressions.h"

namespace sift::data {
namespace {
constexpr char kImpressionsMagic[] = "SIFTIMPR";
}  // namespace

Status WriteImpressions(const std::string& path, const ImpressionData& d) {
  const size_t n = d.user.size();
  const int F = d.num_item_features;
  if (F < 1 || d.cutoff.size() != n || d.time.size() != n || d.label.size() != n ||
      d.target.size() != n * static_cast<size_t>(F)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": impression arrays differ in size"));
  }
  BinaryFileWriter w;
  SIFT_RETURN_IF_ERROR(w.Begin(path, kImpressionsMagic, {n, static_cast<uint64_t>(F), 0}));
  SIFT_RETURN_IF_ERROR(w.Section(d.user.data(), n * sizeof(int64_t)));
  SIFT_RETURN_IF_ERROR(w.Section(d.cutoff.data(), n * sizeof(int64_t)));
  SIFT_RETURN_IF_ERROR(w.Section(d.time.data(), n * sizeof(int64_t)));
  SIFT_RETURN_IF_ERROR(w.Section(d.label.data(), n * sizeof(int32_t)));
  SIFT_RETURN_IF_ERROR(w.Section(d.target.data(), d.target.size() * sizeof(int32_t)));
  return w.Finish();
}

StatusOr<std::unique_ptr<ImpressionsFile>> ImpressionsFile::Open(const std::string& path,
                                                                 bool verify) {
  std::unique_ptr<ImpressionsFile> f(new ImpressionsFile());
  SIFT_ASSIGN_OR_RETURN(f->file_, BinaryFile::Open(path, kImpressionsMagic, verify));
  const auto& c = f->file_.header().counts;
  if (c[1] == 0 || c[1] > 64) {
    return absl::DataLossError(absl::StrCat(path, ": implausible item feature count ", c[1]));
  }
  f->size_ = static_cast<int64_t>(c[0]);
  f->num_item_features_ = static_cast<int>(c[1]);
  SectionReader r(f->file_);
  SIFT_ASSIGN_OR_RETURN(const uint8_t* user, r.NextArray(c[0], sizeof(int64_t)));
  SIFT_ASSIGN_OR_RETURN(const uint8_t* cutoff, r.NextArray(c[0], sizeof(int64_t)));
  SIFT_ASSIGN_OR_RETURN(const uint8_t* time, r.NextArray(c[0], sizeof(int64_t)));
  SIFT_ASSIGN_OR_RETURN(const uint8_t* label, r.NextArray(c[0], sizeof(int32_t)));
  SIFT_ASSIGN_OR_RETURN(const uint8_t* target, r.NextArray(c[0], sizeof(int32_t), c[1]));
  f->user_ = reinterpret_cast<const int64_t*>(user);
  f->cutoff_ = reinterpret_cast<const int64_t*>(cutoff);
  f->time_ = reinterpret_cast<const int64_t*>(time);
  f->label_ = reinterpret_cast<const int32_t*>(label);
  f->target_ = reinterpret_cast<const int32_t*>(target);
  return f;
}

}  // namespace sift::data
