#include "tidal/optim/shard_layout.h"

#include <algorithm>

#include "tidal/base/error.h"

namespace tidal::optim {

ShardLayout make_shard_layout(const std::vector<int64_t>& numels, int ranks, int64_t align) {
  TIDAL_ASSERT(ranks >= 1 && align >= 1);
  ShardLayout l;
  l.offsets.push_back(0);
  for (int64_t n : numels) l.offsets.push_back(l.offsets.back() + n);
  const int64_t total = l.total();
  l.bounds.assign(size_t(ranks) + 1, total);
  l.bounds[0] = 0;
  size_t param = 0;
  for (int r = 1; r < ranks; ++r) {
    const int64_t target = (total * r + ranks - 1) / ranks;  // ⌈r · total / ranks⌉
    while (param + 1 < numels.size() && l.offsets[param + 1] <= target) ++param;
    // Round the cut up to the next aligned element of the parameter it falls in (or its end).
    const int64_t start = l.offsets[param], within = target - start;
    const int64_t cut = start + std::min(numels.empty() ? 0 : numels[param], (within + align - 1) / align * align);
    l.bounds[size_t(r)] = std::max(l.bounds[size_t(r) - 1], std::min(cut, total));
  }
  return l;
}

std::vector<ShardLayout::Fragment> ShardLayout::fragments(int rank) const {
  std::vector<Fragment> out;
  const int64_t begin = shard_begin(rank), end = begin + shard_size(rank);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) {
    const int64_t a = std::max(begin, offsets[i]), b = std::min(end, offsets[i + 1]);
    if (a < b) out.push_back({i, a - offsets[i], b - a});
  }
  return out;
}

int64_t largest_shard(const std::vector<int64_t>& numels, const std::vector<bool>& expert, int ranks,
                      int expert_parallel, int64_t align) {
  TIDAL_ASSERT(expert.size() == numels.size() && expert_parallel >= 1);
  const bool by_kind = expert_parallel > 1 && std::find(expert.begin(), expert.end(), true) != expert.end();
  int64_t shard = 0;
  for (const bool experts : {false, true}) {
    if (experts && !by_kind) break;
    std::vector<int64_t> part;
    for (size_t i = 0; i < numels.size(); ++i)
      if (!by_kind || expert[i] == experts) part.push_back(numels[i]);
    const int n = experts ? std::max(1, ranks / expert_parallel) : ranks;
    const ShardLayout layout = make_shard_layout(part, n, align);
    int64_t largest = 0;
    for (int r = 0; r < n; ++r) largest = std::max(largest, layout.shard_size(r));
    shard += largest;
  }
  return shard;
}

}  // namespace tidal::optim
