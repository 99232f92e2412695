#pragma once
// The BPE model of a byte-level tokenizer: byte tokens, ranked merges, and the merge loop that turns
// one pre-tokenized piece into token ids, with a cache of the pieces already seen.
#include <array>
#include <cstdint>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tidal::data {

// Hashing that lets unordered_map<std::string, ...> be searched with a string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  struct Merge {
    int32_t left, right, result;
  };
  // byte_ids[b]: the token of byte b (-1 when the vocabulary lacks it; then unk_id, or dropped when
  // that is -1, as Hugging Face does). merges in rank order. whole_pieces: for ignore_merges, pieces
  // that are tokens themselves and skip the merge loop (empty otherwise).
  BpeModel(const std::array<int32_t, 256>& byte_ids, const std::vector<Merge>& merges, int32_t unk_id,
           StringMap<int32_t> whole_pieces);

  // The merge loop on one piece's bytes: repeatedly merge the adjacent pair of lowest rank (leftmost
  // among equals), as Hugging Face's BPE::merge_word does. O(n log n) in the piece length.
  void merge(std::string_view piece, std::vector<int32_t>& ids) const;
  int64_t num_merges() const { return int64_t(ranks_.size()); }

  // One encode call: holds the shared cache for reading, keeps its misses locally and publishes them
  // when it ends. Not thread-safe itself; use one per thread.
  class Session {
   public:
    explicit Session(const BpeModel& model);
    ~Session();
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    void encode_piece(std::string_view piece, std::vector<int64_t>& out);

   private:
    const BpeModel& model_;
    std::shared_lock<std::shared_mutex> lock_;
    StringMap<std::vector<int32_t>> misses_;
    std::vector<int32_t> scratch_;
  };

 private:
  struct Rank {
    int32_t rank, result;
  };
  struct Cache {
    std::shared_mutex mutex;
    StringMap<std::vector<int32_t>> pieces;
  };
  std::array<int32_t, 256> byte_ids_;
  std::unordered_map<uint64_t, Rank> ranks_;  // (left << 32 | right) -> rank and result
  int32_t unk_id_;
  StringMap<int32_t> whole_pieces_;
  std::unique_ptr<Cache> cache_;
};

}  // namespace tidal::data
