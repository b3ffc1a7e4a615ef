// Dataset: a sift dataset directory opened for reading — feature_spec.yaml plus either a
// timeline (users.bin + events.bin, source type sift_timeline), a timeline with labelled samples
// (plus train/test.impressions.bin, source type sift_impressions) or explicit samples
// (train.samples.bin + test.samples.bin, source type sift_samples); optionally vocab.bin.
//
// Also the writers that lay out such a directory, so the generator, the Amazon import and the
// TFRecord import all produce the same thing. Immutable after Open; thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/data/feature_spec.h"
#include "common/data/impressions.h"
#include "common/data/sample_source.h"
#include "common/data/samples_file.h"
#include "common/data/timeline.h"
#include "common/data/vocab.h"
#include "common/status.h"

namespace sift::data {

inline constexpr char kFeatureSpecFile[] = "feature_spec.yaml";
inline constexpr char kTrainSamplesFile[] = "train.samples.bin";
inline constexpr char kTestSamplesFile[] = "test.samples.bin";
// Version of the directory layout, written to metadata.sift.format_version. 2 added
// metadata.sift.test_events, metadata.sift.vocab and the sift_impressions source type; Open
// refuses a version above this one (a newer sift wrote it) instead of misreading it.
inline constexpr int kDatasetFormatVersion = 2;
inline constexpr char kSourceImpressions[] = "sift_impressions";

class Dataset {
 public:
  // Opens `dir` and checks every id against its table's cardinality (DATA_LOSS naming the file,
  // the position and the feature). With `verify`, every file's payload checksum is checked too.
  // A reference TFRecord directory is rejected with a hint to import it.
  static StatusOr<std::unique_ptr<Dataset>> Open(const std::string& dir, bool verify = false);

  const std::string& dir() const { return dir_; }
  const FeatureSpec& spec() const { return spec_; }
  const SampleSource& samples() const { return *samples_; }
  // The timeline, or null for an explicit-samples dataset.
  const Timeline* timeline() const { return timeline_.get(); }
  // The raw tokens of the ids, or null when the dataset has none (vocab.h).
  const Vocab* vocab() const { return vocab_.get(); }
  // Leave-last-K-out: the test events per user of a timeline dataset (1 otherwise).
  int64_t test_events() const { return test_events_; }
  // The labelled samples of a sift_impressions dataset (null otherwise).
  const ImpressionsFile* impressions(Split s) const {
    return s == Split::kTrain ? train_imp_.get() : s == Split::kTest ? test_imp_.get() : nullptr;
  }
  const SamplesFile* samples_file(Split s) const {
    return s == Split::kTrain ? train_file_.get() : test_file_.get();
  }
  uint64_t negative_seed() const { return negative_seed_; }
  // "sift_timeline", "sift_impressions" or "sift_samples".
  const std::string& source_type() const { return source_type_; }
  // Full checksum verification of every data file (every id was checked against its table's
  // cardinality by Open already).
  Status Verify() const;

 private:
  Dataset() = default;
  std::string dir_, source_type_;
  FeatureSpec spec_;
  uint64_t negative_seed_ = 0;
  int64_t test_events_ = 1;
  std::unique_ptr<Timeline> timeline_;
  std::unique_ptr<Vocab> vocab_;
  std::unique_ptr<ImpressionsFile> train_imp_, test_imp_;
  std::unique_ptr<SamplesFile> train_file_, test_file_;
  std::unique_ptr<SampleSource> samples_;
};

// Prepares `dir` for writing a dataset: creates it and removes an existing feature_spec.yaml.
// Every writer calls this first and writes feature_spec.yaml last, so the spec is the commit
// point: a directory whose writing failed half-way is "not a dataset directory", never a mix of
// old and new files that opens. (Two writers into one directory at once are not supported.)
Status BeginDatasetWrite(const std::string& dir);

// Writes a timeline dataset: users.bin, events.bin and feature_spec.yaml (reference schema with
// history length `history`, source type sift_timeline). `cardinalities` = user features then
// item features. `metadata` is stored under feature_spec.yaml's metadata, with
// metadata.sift.{format_version, negative_seed} added.
//
// `extras` adds what imports from raw logs have: leave-last-K-out (metadata.sift.test_events;
// every user needs K + 2 events), the tokens of the ids (vocab.bin, metadata.sift.vocab; one
// table per user/item feature, in order, each as long as its cardinality), or labelled samples
// (source type sift_impressions: <split>.impressions.bin; users may then have no event).
struct TimelineDatasetExtras {
  int64_t test_events = 1;
  const std::vector<VocabTable>* vocab = nullptr;
  const ImpressionData* train_impressions = nullptr;  // both or neither
  const ImpressionData* test_impressions = nullptr;
};
Status WriteTimelineDataset(const std::string& dir, const TimelineData& timeline,
                            const std::vector<int64_t>& user_cardinalities,
                            const std::vector<int64_t>& item_cardinalities, uint64_t negative_seed,
                            const YAML::Node& metadata, int64_t history = 100,
                            const TimelineDatasetExtras& extras = {});

// Writes the feature_spec.yaml of an explicit-samples dataset whose sample files are already
// in `dir` (written with SamplesFileWriter to kTrainSamplesFile / kTestSamplesFile).
Status WriteSamplesDatasetSpec(const std::string& dir, const FeatureSpec& reference_spec,
                               const YAML::Node& metadata);

}  // namespace sift::data
