#include "common/data/timeline.h"

#include "common/file_util.h"

namespace sift::data {
namespace {
constexpr char kEventsMagic[] = "SIFTEVNT";
constexpr char kUsersMagic[] = "SIFTUSER";
}  // namespace

Status WriteTimeline(const std::string& dir, const TimelineData& t, int64_t min_events) {
  const int64_t U = t.num_users(), E = t.num_events();
  const int F = t.num_item_features, UF = t.num_user_features;
  if (F <= 0 || U < 0 || static_cast<int64_t>(t.events.size()) != E * F) {
    return absl::InvalidArgumentError("timeline: events size is not a multiple of the features");
  }
  if (!t.timestamps.empty() && static_cast<int64_t>(t.timestamps.size()) != E) {
    return absl::InvalidArgumentError("timeline: timestamps size differs from the event count");
  }
  if (static_cast<int64_t>(t.user_features.size()) != U * UF) {
    return absl::InvalidArgumentError("timeline: user features size differs from users x UF");
  }
  if (t.user_offsets.empty() || t.user_offsets.front() != 0 ||
      t.user_offsets.back() != static_cast<uint64_t>(E)) {
    return absl::InvalidArgumentError("timeline: user offsets must run from 0 to the event count");
  }
  for (int64_t u = 0; u < U; ++u) {
    if (t.user_offsets[u + 1] < t.user_offsets[u] + static_cast<uint64_t>(min_events) ||
        t.user_offsets[u + 1] < t.user_offsets[u]) {
      return absl::InvalidArgumentError(
          absl::StrCat("timeline: user ", u, " has fewer than ", min_events, " events"));
    }
  }
  SIFT_RETURN_IF_ERROR(MakeDirs(dir));
  BinaryFileWriter ev;
  SIFT_RETURN_IF_ERROR(ev.Begin(
      JoinPath(dir, kEventsFile), kEventsMagic,
      {static_cast<uint64_t>(E), static_cast<uint64_t>(F), t.timestamps.empty() ? 0u : 1u}));
  SIFT_RETURN_IF_ERROR(ev.Section(t.events.data(), t.events.size() * sizeof(int32_t)));
  if (!t.timestamps.empty()) {
    SIFT_RETURN_IF_ERROR(ev.Section(t.timestamps.data(), t.timestamps.size() * sizeof(int64_t)));
  }
  SIFT_RETURN_IF_ERROR(ev.Finish());
  BinaryFileWriter us;
  SIFT_RETURN_IF_ERROR(
      us.Begin(JoinPath(dir, kUsersFile), kUsersMagic,
               {static_cast<uint64_t>(U), static_cast<uint64_t>(UF), static_cast<uint64_t>(E)}));
  SIFT_RETURN_IF_ERROR(us.Section(t.user_offsets.data(), t.user_offsets.size() * sizeof(uint64_t)));
  SIFT_RETURN_IF_ERROR(
      us.Section(t.user_features.data(), t.user_features.size() * sizeof(int32_t)));
  return us.Finish();
}

StatusOr<std::unique_ptr<Timeline>> Timeline::Open(const std::string& dir, bool verify,
                                                   int64_t min_events) {
  std::unique_ptr<Timeline> t(new Timeline());
  const std::string ev_path = JoinPath(dir, kEventsFile), us_path = JoinPath(dir, kUsersFile);
  SIFT_ASSIGN_OR_RETURN(t->events_file_, BinaryFile::Open(ev_path, kEventsMagic, verify));
  SIFT_ASSIGN_OR_RETURN(t->users_file_, BinaryFile::Open(us_path, kUsersMagic, verify));
  const auto& ec = t->events_file_.header().counts;
  const auto& uc = t->users_file_.header().counts;
  if (ec[1] == 0 || ec[1] > 64 || ec[2] > 1) {
    return absl::DataLossError(absl::StrCat(ev_path, ": implausible header counts (features ",
                                            ec[1], ", timestamps flag ", ec[2], ")"));
  }
  if (uc[1] > 64) {
    return absl::DataLossError(absl::StrCat(us_path, ": implausible user feature count ", uc[1]));
  }
  if (uc[2] != ec[0]) {
    return absl::InvalidArgumentError(absl::StrCat(us_path, " describes ", uc[2], " events but ",
                                                   ev_path, " holds ", ec[0],
                                                   ": the files belong to different datasets"));
  }
  t->num_events_ = static_cast<int64_t>(ec[0]);
  t->num_item_features_ = static_cast<int>(ec[1]);
  t->num_users_ = static_cast<int64_t>(uc[0]);
  t->num_user_features_ = static_cast<int>(uc[1]);
  {
    SectionReader r(t->events_file_);
    SIFT_ASSIGN_OR_RETURN(const uint8_t* p, r.NextArray(ec[0], sizeof(int32_t), ec[1]));
    t->events_ = reinterpret_cast<const int32_t*>(p);
    if (ec[2]) {
      SIFT_ASSIGN_OR_RETURN(const uint8_t* ts, r.NextArray(ec[0], sizeof(int64_t)));
      t->timestamps_ = reinterpret_cast<const int64_t*>(ts);
    }
  }
  {
    SectionReader r(t->users_file_);
    // U + 1 offsets: bound U by the payload first so that U + 1 cannot wrap.
    if (uc[0] >= t->users_file_.header().payload_size / sizeof(uint64_t)) {
      return absl::DataLossError(
          absl::StrCat(us_path, ": header claims ", uc[0], " users, more than the file holds"));
    }
    SIFT_ASSIGN_OR_RETURN(const uint8_t* p, r.NextArray(uc[0] + 1, sizeof(uint64_t)));
    t->offsets_ = reinterpret_cast<const uint64_t*>(p);
    SIFT_ASSIGN_OR_RETURN(const uint8_t* f, r.NextArray(uc[0], sizeof(int32_t), uc[1]));
    t->user_features_ = reinterpret_cast<const int32_t*>(f);
  }
  if (t->offsets_[0] != 0 || t->offsets_[t->num_users_] != ec[0]) {
    return absl::DataLossError(
        absl::StrCat(us_path, ": user offsets do not span the ", ec[0], " events"));
  }
  for (int64_t u = 0; u < t->num_users_; ++u) {
    if (t->offsets_[u + 1] < t->offsets_[u] + static_cast<uint64_t>(min_events) ||
        t->offsets_[u + 1] < t->offsets_[u]) {
      return absl::DataLossError(absl::StrCat(us_path, ": user ", u, " has fewer than ", min_events,
                                              " events or offsets decrease"));
    }
  }
  return t;
}

Status Timeline::Verify() const {
  SIFT_RETURN_IF_ERROR(events_file_.VerifyPayload());
  return users_file_.VerifyPayload();
}

}  // namespace sift::data
