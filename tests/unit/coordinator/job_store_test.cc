// JobStore: records round-trip through JSON (non-finite numbers included), logs append, the job
// counter persists, and a corrupt record stops Open with an error naming the file.
#include "server/coordinator/job_store.h"

#include <cmath>
#include <limits>
#include <string>

#include "common/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/util/test_util.h"

namespace sift::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

JobRecord SampleRecord(const std::string& id) {
  JobRecord r;
  pb::JobInfo& i = r.info;
  i.set_job_id(id);
  i.set_name("tiny \"quoted\" ünï");
  i.set_state(pb::CHECKPOINTING);
  i.set_message("line one");
  i.set_spec_yaml("dataset: \"/d\"\n");
  i.set_generation(3);
  i.set_recoveries(2);
  i.set_epoch(1);
  i.set_epochs(3);
  i.set_global_step(123456789012);
  i.set_steps_per_epoch(40);
  i.set_samples_total(int64_t{1} << 40);
  i.set_samples_per_second(1234.5);
  i.set_last_loss(std::numeric_limits<double>::quiet_NaN());
  pb::EpochResult* e = i.add_epochs_done();
  e->set_epoch(0);
  e->set_train_auc(0.71);
  e->set_train_loss(std::numeric_limits<double>::infinity());
  e->set_test_auc(0.7);
  e->set_test_loss(-std::numeric_limits<double>::infinity());
  e->set_samples_per_second(1e6);
  e->set_train_time_s(12.25);
  i.mutable_last_checkpoint()->set_dir("/ckpt/x");
  i.mutable_last_checkpoint()->set_epochs_done(1);
  i.mutable_last_checkpoint()->set_global_step(40);
  i.mutable_last_checkpoint()->set_generation(2);
  i.set_oracle_test_auc(-1);
  i.set_submit_time(1.7e9 + 0.125);
  i.set_start_time(1.7e9 + 1);
  i.set_time_to_train_s(12.25);
  i.add_workers("w0");
  i.add_workers("w1");
  i.add_servers("s0:1");
  r.dll_metadata_written = true;
  r.steps_total = 99;
  r.epoch_perf[0] = EpochPerf{{{"throughput", 1e6}, {"time", 12.25}}, 12.25};
  return r;
}

TEST(JobStoreTest, RecordRoundTripsThroughJson) {
  const JobRecord r = SampleRecord("job-3");
  auto back = JobRecordFromJson(JobRecordToJson(r), "x.json");
  ASSERT_TRUE(back.ok()) << back.status();
  // NaN != NaN: compare it apart, then the rest byte for byte.
  EXPECT_TRUE(std::isnan(back->info.last_loss()));
  pb::JobInfo a = r.info, b = back->info;
  a.set_last_loss(0);
  b.set_last_loss(0);
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString()) << JobRecordToJson(r);
  EXPECT_EQ(back->dll_metadata_written, true);
  EXPECT_EQ(back->steps_total, 99);
  EXPECT_EQ(back->epoch_perf, r.epoch_perf);
}

TEST(JobStoreTest, BadRecordsNameTheFileAndField) {
  auto bad = JobRecordFromJson("{\"format\": 1", "jobs/job-1.json");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("jobs/job-1.json: corrupt job record"));
  std::string text = JobRecordToJson(SampleRecord("job-1"));
  const std::string wrong = [&] {
    std::string t = text;
    t.replace(t.find("\"generation\": 3"), 15, "\"generation\": \"3\"");
    return t;
  }();
  bad = JobRecordFromJson(wrong, "j.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()),
              HasSubstr("j.json: corrupt job record: field generation: not an integer"));
  std::string state = text;
  state.replace(state.find("\"CHECKPOINTING\""), 15, "\"SLEEPING\"");
  bad = JobRecordFromJson(state, "j.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("field state: not a job state"));
}

TEST(JobStoreTest, SavesLogsAndCounterAndLoadsThemBack) {
  testing::TempDir dir;
  const std::string state = dir.Sub("state");
  JobStore::Loaded loaded;
  {
    auto store = JobStore::Open(state, &loaded);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_TRUE(loaded.jobs.empty());
    EXPECT_EQ(loaded.next_job_number, 1);
    ASSERT_TRUE((*store)->Save(SampleRecord("job-10")).ok());
    ASSERT_TRUE((*store)->Save(SampleRecord("job-2")).ok());
    ASSERT_TRUE((*store)->AppendLog("job-2", "first").ok());
    ASSERT_TRUE((*store)->AppendLog("job-2", "second").ok());
    ASSERT_TRUE((*store)->SaveNextJobNumber(4).ok());
  }
  auto store = JobStore::Open(state, &loaded);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_EQ(loaded.jobs.size(), 2u);
  EXPECT_EQ(loaded.jobs[0].info.job_id(), "job-2");  // by number, not by name
  EXPECT_EQ(loaded.jobs[1].info.job_id(), "job-10");
  EXPECT_THAT(loaded.logs[0], ElementsAre("first", "second"));
  EXPECT_TRUE(loaded.logs[1].empty());
  EXPECT_EQ(loaded.next_job_number, 11);  // never reuses a record's number

  store->reset();  // the state directory has one owner at a time (DirLock)

  // A corrupt record stops the load, naming the file.
  testing::WriteAll(state + "/jobs/job-5.json", "{ not json");
  auto broken = JobStore::Open(state, &loaded);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()), HasSubstr("jobs/job-5.json: corrupt"));
  // So does a record filed under another job's name.
  ASSERT_TRUE(
      WriteFileAtomic(state + "/jobs/job-5.json", JobRecordToJson(SampleRecord("job-6"))).ok());
  broken = JobStore::Open(state, &loaded);
  ASSERT_FALSE(broken.ok());
  EXPECT_THAT(std::string(broken.status().message()),
              HasSubstr("job-5.json: corrupt job record: job_id \"job-6\""));
}

TEST(JobStoreTest, JobNumbers) {
  EXPECT_EQ(JobNumber("job-1"), 1);
  EXPECT_EQ(JobNumber("job-123"), 123);
  EXPECT_EQ(JobNumber("job-0"), -1);
  EXPECT_EQ(JobNumber("job-"), -1);
  EXPECT_EQ(JobNumber("job--1"), -1);
  EXPECT_EQ(JobNumber("job-1x"), -1);
  EXPECT_EQ(JobNumber("jab-1"), -1);
}

}  // namespace
}  // namespace sift::coordinator
