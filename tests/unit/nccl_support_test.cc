// The host-side pieces of the NCCL collectives: unique-id hex round trip and its errors, and the
// watchdog loop's success / error / timeout paths under an injected clock (no real time, no GPU).
#include "worker/nccl_support.h"

#include <cstdint>
#include <string>
#include <vector>

#include "common/rng.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sift::worker {
namespace {

using ::testing::HasSubstr;

// Time moves only when the watchdog sleeps (and by `per_now` on every Now(), if set).
class FakeClock : public WatchdogClock {
 public:
  absl::Time Now() override {
    now_ += per_now;
    return now_;
  }
  void SleepFor(absl::Duration d) override {
    sleeps.push_back(d);
    now_ += d;
  }
  absl::Time now() const { return now_; }

  absl::Duration per_now = absl::ZeroDuration();
  std::vector<absl::Duration> sleeps;

 private:
  absl::Time now_ = absl::FromUnixSeconds(1'000'000);
};

std::vector<uint8_t> RandomId(uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> id(kNcclUniqueIdBytes);
  for (uint8_t& b : id) b = static_cast<uint8_t>(rng.Below(256));
  return id;
}

TEST(NcclUniqueIdTest, HexRoundTrip) {
  const std::vector<uint8_t> id = RandomId(7);
  const std::string text = EncodeNcclUniqueId(id);
  ASSERT_EQ(text.size(), 2 * kNcclUniqueIdBytes);
  EXPECT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos);
  auto back = DecodeNcclUniqueId(text, "job/0/nccl_id");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, id);
}

TEST(NcclUniqueIdTest, EncodesEveryByteValue) {
  std::vector<uint8_t> id(kNcclUniqueIdBytes);
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<uint8_t>(i * 2 + 1);
  id[0] = 0x00;
  id[1] = 0xff;
  id[2] = 0x0a;
  id[3] = 0xa0;
  const std::string text = EncodeNcclUniqueId(id);
  EXPECT_EQ(text.substr(0, 8), "00ff0aa0");
  auto back = DecodeNcclUniqueId(text, "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, id);
}

TEST(NcclUniqueIdTest, DecodeAcceptsUpperCase) {
  const std::vector<uint8_t> id = RandomId(11);
  std::string text = EncodeNcclUniqueId(id);
  for (char& c : text) {
    if (c >= 'a' && c <= 'f') c = static_cast<char>(c - 'a' + 'A');
  }
  auto back = DecodeNcclUniqueId(text, "k");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, id);
}

TEST(NcclUniqueIdTest, WrongLengthNamesTheKey) {
  const std::string text = EncodeNcclUniqueId(RandomId(3));
  for (const std::string& bad : {std::string(), text.substr(1), text + "00", text.substr(2)}) {
    auto r = DecodeNcclUniqueId(bad, "job-a/gen-3/nccl_id");
    ASSERT_FALSE(r.ok()) << bad.size();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(r.status().message(), HasSubstr("job-a/gen-3/nccl_id"));
    EXPECT_THAT(r.status().message(), HasSubstr(absl::StrCat("got ", bad.size())));
  }
}

TEST(NcclUniqueIdTest, NonHexCharacterNamesKeyAndPosition) {
  std::string text = EncodeNcclUniqueId(RandomId(5));
  text[37] = 'g';
  auto r = DecodeNcclUniqueId(text, "p/nccl_id");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(r.status().message(), HasSubstr("p/nccl_id"));
  EXPECT_THAT(r.status().message(), HasSubstr("character 37"));
  text[37] = '0';
  text[0] = ' ';
  r = DecodeNcclUniqueId(text, "p/nccl_id");
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.status().message(), HasSubstr("character 0"));
}

TEST(WatchdogSleepTest, SpinsThenDoublesUpToTheCap) {
  WatchdogOptions o;
  o.spin_polls = 3;
  o.min_sleep = absl::Microseconds(10);
  o.max_sleep = absl::Microseconds(100);
  EXPECT_EQ(WatchdogSleep(0, o), absl::ZeroDuration());
  EXPECT_EQ(WatchdogSleep(2, o), absl::ZeroDuration());
  EXPECT_EQ(WatchdogSleep(3, o), absl::Microseconds(10));
  EXPECT_EQ(WatchdogSleep(4, o), absl::Microseconds(20));
  EXPECT_EQ(WatchdogSleep(5, o), absl::Microseconds(40));
  EXPECT_EQ(WatchdogSleep(6, o), absl::Microseconds(80));
  EXPECT_EQ(WatchdogSleep(7, o), absl::Microseconds(100));
  EXPECT_EQ(WatchdogSleep(1'000'000'000, o), absl::Microseconds(100));
}

WatchdogOptions TestOptions() {
  WatchdogOptions o;
  o.timeout = absl::Seconds(2);
  o.spin_polls = 2;
  o.min_sleep = absl::Milliseconds(1);
  o.max_sleep = absl::Milliseconds(100);
  return o;
}

TEST(WaitWithWatchdogTest, SucceedsWhenThePollFinishes) {
  FakeClock clock;
  int polls = 0, aborts = 0;
  Status st = WaitWithWatchdog(
      "nccl allreduce (rank 0 of 1)", TestOptions(),
      [&]() -> StatusOr<bool> { return ++polls == 5; },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      clock);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(polls, 5);
  EXPECT_EQ(aborts, 0);
  // Two spins (yield), then 1 ms, 2 ms between the five polls.
  EXPECT_THAT(clock.sleeps, ::testing::ElementsAre(absl::ZeroDuration(), absl::ZeroDuration(),
                                                   absl::Milliseconds(1), absl::Milliseconds(2)));
}

TEST(WaitWithWatchdogTest, FirstPollDoneNeverSleeps) {
  FakeClock clock;
  int aborts = 0;
  Status st = WaitWithWatchdog(
      "x", TestOptions(), []() -> StatusOr<bool> { return true; },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      clock);
  EXPECT_TRUE(st.ok());
  EXPECT_TRUE(clock.sleeps.empty());
  EXPECT_EQ(aborts, 0);
}

TEST(WaitWithWatchdogTest, PollErrorAbortsAndKeepsTheCode) {
  FakeClock clock;
  int polls = 0, aborts = 0;
  Status st = WaitWithWatchdog(
      "nccl allreduce (rank 1 of 4, prefix 'job/2')", TestOptions(),
      [&]() -> StatusOr<bool> {
        if (++polls < 3) return false;
        return absl::UnavailableError("ncclRemoteError (remote process exited)");
      },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      clock);
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(st.message(), HasSubstr("nccl allreduce (rank 1 of 4, prefix 'job/2'): "));
  EXPECT_THAT(st.message(), HasSubstr("ncclRemoteError"));
  EXPECT_THAT(st.message(), ::testing::Not(HasSubstr("abort failed")));
  EXPECT_EQ(polls, 3);
  EXPECT_EQ(aborts, 1);
}

TEST(WaitWithWatchdogTest, TimeoutAbortsWithDeadlineExceeded) {
  FakeClock clock;
  const absl::Time start = clock.now();
  int polls = 0, aborts = 0;
  Status st = WaitWithWatchdog(
      "nccl init (rank 1 of 2, prefix 'job/0')", TestOptions(),
      [&]() -> StatusOr<bool> {
        ++polls;
        return false;
      },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      clock);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), HasSubstr("nccl init (rank 1 of 2, prefix 'job/0')"));
  EXPECT_THAT(st.message(), HasSubstr("not finished within 2s"));
  EXPECT_THAT(st.message(), HasSubstr("aborted"));
  EXPECT_EQ(aborts, 1);
  // It waited exactly until the deadline (the last sleep is cut to it), not past it.
  EXPECT_EQ(clock.now() - start, absl::Seconds(2));
  for (absl::Duration d : clock.sleeps) EXPECT_LE(d, absl::Milliseconds(100));
  // 2 spins + 1+2+4+...+64 ms (127 ms in 7 sleeps) + 100 ms sleeps up to 2 s.
  EXPECT_EQ(polls, static_cast<int>(clock.sleeps.size()) + 1);
  EXPECT_EQ(clock.sleeps.back(), absl::Milliseconds(73));  // 2000 - 127 - 18 * 100
}

TEST(WaitWithWatchdogTest, AbortFailureIsAddedToTheError) {
  FakeClock clock;
  Status st = WaitWithWatchdog(
      "op", TestOptions(), []() -> StatusOr<bool> { return false; },
      [] { return absl::InternalError("ncclCommAbort failed: ncclInternalError"); }, clock);
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(st.message(), HasSubstr("and the abort failed: ncclCommAbort failed"));
}

TEST(WaitWithWatchdogTest, DeadlineIsCheckedAfterEveryUnfinishedPoll) {
  // The clock jumps past the deadline between two polls; the poll after it reports done: the
  // work finished, so it is not a timeout.
  FakeClock clock;
  int polls = 0, aborts = 0;
  Status st = WaitWithWatchdog(
      "op", TestOptions(),
      [&]() -> StatusOr<bool> {
        if (++polls == 1) clock.SleepFor(absl::Seconds(5));  // e.g. the thread was descheduled
        return polls == 2;
      },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      clock);
  // Poll 1 (not done) is followed by the deadline check, which fires: a timeout.
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(polls, 1);
  EXPECT_EQ(aborts, 1);

  // Done on the first poll even though time already passed the deadline inside it.
  FakeClock clock2;
  polls = 0;
  aborts = 0;
  st = WaitWithWatchdog(
      "op", TestOptions(),
      [&]() -> StatusOr<bool> {
        clock2.SleepFor(absl::Seconds(5));
        ++polls;
        return true;
      },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      clock2);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(aborts, 0);
}

TEST(WaitWithWatchdogTest, RealClockTimesOutOnAShortDeadline) {
  // The real clock with a tiny timeout: only the outcome is checked, never a duration.
  WatchdogOptions o;
  o.timeout = absl::Milliseconds(5);
  int aborts = 0;
  Status st = WaitWithWatchdog(
      "op", o, []() -> StatusOr<bool> { return false; },
      [&] {
        ++aborts;
        return absl::OkStatus();
      },
      *RealWatchdogClock());
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(aborts, 1);
}

}  // namespace
}  // namespace sift::worker
