#include "common/data/category_index.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace sift::data {

StatusOr<std::unique_ptr<CategoryIndex>> CategoryIndex::Build(const Timeline* tl,
                                                              ThreadPool* pool) {
  if (tl->num_item_features() < 2) {
    return absl::FailedPreconditionError(
        absl::StrCat("hard search needs a category (item feature 1); the timeline has ",
                     tl->num_item_features(), " item feature(s)"));
  }
  const int64_t U = tl->num_users();
  for (int64_t u = 0; u < U; ++u) {
    if (tl->user_length(u) >= (int64_t{1} << 32)) {
      return absl::FailedPreconditionError(
          absl::StrCat("hard search: user ", u, " holds ", tl->user_length(u),
                       " events (the index holds positions below 2^32)"));
    }
  }
  std::unique_ptr<CategoryIndex> index(new CategoryIndex(tl));
  index->sorted_.resize(static_cast<size_t>(tl->num_events()));
  const int F = tl->num_item_features();
  auto sort_users = [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t begin = static_cast<int64_t>(tl->user_begin(u));
      uint32_t* pos = index->sorted_.data() + begin;
      const int64_t n = tl->user_length(u);
      std::iota(pos, pos + n, uint32_t{0});
      const int32_t* cat = tl->events() + begin * F + 1;
      // Stable on equal categories: positions stay ascending inside a category's run.
      std::stable_sort(pos, pos + n, [cat, F](uint32_t a, uint32_t b) {
        return cat[static_cast<int64_t>(a) * F] < cat[static_cast<int64_t>(b) * F];
      });
    }
  };
  if (pool == nullptr) {
    sort_users(0, U);
  } else {
    pool->ParallelFor(U, 64, sort_users);
  }
  return index;
}

void CategoryIndex::Range(int64_t u, int32_t c, int64_t lo, int64_t hi, const uint32_t** first,
                          const uint32_t** last) const {
  const int64_t begin = static_cast<int64_t>(tl_->user_begin(u));
  const uint32_t* b = sorted_.data() + begin;
  const uint32_t* e = sorted_.data() + tl_->user_end(u);
  const int F = tl_->num_item_features();
  const int32_t* cat = tl_->events() + begin * F + 1;
  // (category, position) order: p < key iff (cat[p], p) < (c, bound).
  auto before = [cat, F, c](uint32_t p, int64_t bound) {
    const int32_t pc = cat[static_cast<int64_t>(p) * F];
    return pc < c || (pc == c && static_cast<int64_t>(p) < bound);
  };
  *first = std::lower_bound(b, e, lo, before);
  *last = std::lower_bound(*first, e, hi, before);
}

int64_t CategoryIndex::Search(int64_t u, int32_t category, int64_t lo, int64_t hi, int64_t k,
                              uint32_t* out) const {
  const uint32_t *first, *last;
  Range(u, category, lo, hi, &first, &last);
  const int64_t n = std::min<int64_t>(k, last - first);
  std::copy(last - n, last, out);
  return n;
}

int64_t CategoryIndex::Count(int64_t u, int32_t category, int64_t lo, int64_t hi) const {
  const uint32_t *first, *last;
  Range(u, category, lo, hi, &first, &last);
  return last - first;
}

}  // namespace sift::data
