// Fuzz target: the job spec (common/job_spec.h ParseJobSpec), what `sift submit` sends and the
// coordinator parses.
//
// Input: the YAML text. Invariants: errors are INVALID_ARGUMENT starting with the source name;
// an accepted spec round-trips exactly (ParseJobSpec(JobSpecToYaml(spec)) == spec) and goes
// through CheckClusterJob without crashing.
#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "common/job_spec.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = sift::ParseJobSpec(text, "job.yaml");
  sift::fuzz::Note("parse", spec.status());
  if (!spec.ok()) {
    FUZZ_CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument,
               spec.status().ToString());
    FUZZ_CHECK(absl::StartsWith(spec.status().message(), "job.yaml"), spec.status().ToString());
    return 0;
  }
  (void)sift::CheckClusterJob(*spec, "job.yaml");
  const std::string yaml = sift::JobSpecToYaml(*spec);
  auto again = sift::ParseJobSpec(yaml, "canonical.yaml");
  FUZZ_CHECK(again.ok(), again.status().ToString() + "\n--- written:\n" + yaml);
  FUZZ_CHECK(*again == *spec, "the canonical YAML reads back as the same spec:\n" + yaml);
  return 0;
}
