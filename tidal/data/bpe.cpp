#include "tidal/data/bpe.h"

#include <algorithm>
#include <mutex>

namespace tidal::data {
namespace {

constexpr size_t kMaxCachedPieceBytes = 256;  // longer pieces are rare; caching them wastes memory
constexpr size_t kMaxCacheEntries = size_t(1) << 20;

inline uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

}  // namespace

BpeModel::BpeModel(const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges, int32_t unk_id,
                   StringMap<int32_t> whole_pieces)
    : byte_ids_(byte_ids), unk_id_(unk_id), whole_pieces_(std::move(whole_pieces)), cache_(std::make_unique<Cache>()) {
  ranks_.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r)  // a repeated pair keeps its last rank (as a Rust HashMap collect)
    ranks_[pair_key(merges[r].left, merges[r].right)] = Rank{int32_t(r), merges[r].result};
}

void BpeModel::merge(std::string_view piece, std::vector<int32_t>& ids) const {
  ids.clear();
  if (!whole_pieces_.empty()) {
    auto it = whole_pieces_.find(piece);
    if (it != whole_pieces_.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  for (unsigned char c : piece) {
    const int32_t id = byte_ids_[c] >= 0 ? byte_ids_[c] : unk_id_;
    if (id >= 0) ids.push_back(id);
  }
  const int n = int(ids.size());
  if (n < 2) return;
  // Symbols in a linked list; candidate merges in a min-heap of (rank, position). A candidate is
  // stale when its left symbol was merged away or its right neighbour changed; it is then skipped.
  struct Candidate {
    int32_t rank, pos, result;
    bool operator<(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<Candidate> heap;
  prev.resize(size_t(n));
  next.resize(size_t(n));
  heap.clear();
  for (int i = 0; i < n; ++i) {
    prev[size_t(i)] = i - 1;
    next[size_t(i)] = i + 1 < n ? i + 1 : -1;
  }
  auto consider = [&](int pos) {
    const int nx = next[size_t(pos)];
    if (nx < 0) return;
    auto it = ranks_.find(pair_key(ids[size_t(pos)], ids[size_t(nx)]));
    if (it == ranks_.end()) return;
    heap.push_back({it->second.rank, pos, it->second.result});
    std::push_heap(heap.begin(), heap.end());
  };
  for (int i = 0; i + 1 < n; ++i) consider(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate c = heap.back();
    heap.pop_back();
    const int pos = c.pos;
    if (ids[size_t(pos)] < 0) continue;  // merged into its left neighbour
    const int nx = next[size_t(pos)];
    if (nx < 0) continue;
    auto it = ranks_.find(pair_key(ids[size_t(pos)], ids[size_t(nx)]));
    if (it == ranks_.end() || it->second.rank != c.rank) continue;  // the pair here changed
    ids[size_t(pos)] = c.result;
    ids[size_t(nx)] = -1;
    next[size_t(pos)] = next[size_t(nx)];
    if (next[size_t(pos)] >= 0) prev[size_t(next[size_t(pos)])] = pos;
    if (prev[size_t(pos)] >= 0) consider(prev[size_t(pos)]);
    consider(pos);
  }
  size_t kept = 0;
  for (int i = 0; i >= 0; i = next[size_t(i)]) ids[kept++] = ids[size_t(i)];
  ids.resize(kept);
}

BpeModel::Session::Session(const BpeModel& model) : model_(model), lock_(model.cache_->mutex) {}

BpeModel::Session::~Session() {
  lock_.unlock();
  if (misses_.empty()) return;
  try {
    std::unique_lock<std::shared_mutex> write(model_.cache_->mutex);
    auto& pieces = model_.cache_->pieces;
    for (auto& [piece, ids] : misses_) {
      if (pieces.size() >= kMaxCacheEntries) break;
      pieces.emplace(piece, std::move(ids));
    }
  } catch (...) {  // the cache is an optimization: failing to grow it changes nothing
  }
}

void BpeModel::Session::encode_piece(std::string_view piece, std::vector<int64_t>& out) {
  if (piece.size() == 1) {  // a single byte never merges
    const int32_t id = model_.byte_ids_[uint8_t(piece[0])] >= 0 ? model_.byte_ids_[uint8_t(piece[0])] : model_.unk_id_;
    if (id >= 0) out.push_back(id);
    return;
  }
  const bool cacheable = piece.size() <= kMaxCachedPieceBytes;
  if (cacheable) {
    const std::vector<int32_t>* hit = nullptr;
    if (auto it = model_.cache_->pieces.find(piece); it != model_.cache_->pieces.end())
      hit = &it->second;
    else if (auto jt = misses_.find(piece); jt != misses_.end())
      hit = &jt->second;
    if (hit != nullptr) {
      out.insert(out.end(), hit->begin(), hit->end());
      return;
    }
  }
  model_.merge(piece, scratch_);
  out.insert(out.end(), scratch_.begin(), scratch_.end());
  if (cacheable && misses_.size() < kMaxCacheEntries) misses_.emplace(piece, scratch_);
}

}  // namespace tidal::data
