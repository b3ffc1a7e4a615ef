// Fuzz target: opening a dataset directory (common/data/dataset.h Dataset::Open): the
// feature_spec.yaml, the timeline's events.bin + users.bin (timeline.h) or the explicit
// samples' train/test.samples.bin (samples_file.h), their headers and cross-checks — then what
// training does with an opened dataset: materialise samples (sample_source.h) and verify.
//
// Input: one mode byte, then five parts separated by kPartSeparator: feature_spec.yaml,
// events.bin, users.bin, train.samples.bin, test.samples.bin (an empty part: no such file). Mode
// bits 0-2: the header fields FixBinaryHeader repairs in every binary file; bit 3: open with
// verify; bit 4: batches with long negatives. Invariants: errors are values with a message; an
// opened dataset's first, middle and last sample of each split materialise within bounds (ASan),
// with history lengths within the batch's slots.
#include <cstdint>
#include <string>
#include <vector>

#include "common/data/batch.h"
#include "common/data/dataset.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

using sift::data::Split;

void Materialize(const sift::data::Dataset& d, bool long_negatives) {
  const sift::data::SampleSource& samples = d.samples();
  sift::data::HistoryOptions h;
  h.max_history = 12;
  h.short_history = 4;
  h.long_negatives = long_negatives;
  sift::data::Batch batch;
  batch.Allocate(3, samples.num_user_features(), samples.num_item_features(), h);
  for (Split split : {Split::kTrain, Split::kTest}) {
    const int64_t n = samples.NumSamples(split);
    FUZZ_CHECK(n >= 0, "sample count");
    if (n == 0) continue;
    int64_t row = 0;
    for (int64_t index : {int64_t{0}, n / 2, n - 1}) {
      samples.Materialize(split, index, row, &batch);
      FUZZ_CHECK(batch.hist_len[row] >= 0 && batch.hist_len[row] <= h.max_history, "hist_len");
      (void)samples.UserOf(split, index);
      ++row;
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  sift::fuzz::Input in(data, size);
  const uint8_t mode = in.Byte();
  const std::vector<absl::string_view> parts = sift::fuzz::SplitParts(in.Rest(), 5);
  const auto& scratch = sift::fuzz::ScratchDir::Get();
  scratch.Reset();
  sift::fuzz::WriteFile(scratch.File(sift::data::kFeatureSpecFile), parts[0]);
  const char* const names[] = {sift::data::kEventsFile, sift::data::kUsersFile,
                               sift::data::kTrainSamplesFile, sift::data::kTestSamplesFile};
  for (int i = 0; i < 4; ++i) {
    if (parts[1 + i].empty()) continue;
    std::string file(parts[1 + i]);
    sift::fuzz::FixBinaryHeader(&file, mode & sift::fuzz::kFixAll);
    sift::fuzz::WriteFile(scratch.File(names[i]), file);
  }
  auto d = sift::data::Dataset::Open(scratch.path(), /*verify=*/mode & 8);
  sift::fuzz::Note("open", d.status());
  if (!d.ok()) {
    FUZZ_CHECK(!d.status().message().empty(), d.status().ToString());
    return 0;
  }
  Materialize(**d, mode & 16);
  const sift::Status v = (*d)->Verify();
  if (!v.ok()) FUZZ_CHECK(!v.message().empty(), v.ToString());
  if (mode & 8) FUZZ_CHECK(v.ok(), "a dataset opened with verify verifies: " + v.ToString());
  return 0;
}
