#include "tidal/data/instruction_sample.h"

#include <algorithm>
#include <map>
#include <set>
#include <string_view>

#include "tidal/base/error.h"

namespace tidal::data {

std::vector<InstructionSample> encode_conversations(const Tokenizer& tok,
                                                    const std::vector<std::vector<ChatSegment>>& conversations,
                                                    int64_t eod_id) {
  std::vector<std::string_view> texts;
  for (const auto& segments : conversations)
    for (const ChatSegment& s : segments) texts.push_back(s.text);
  const std::vector<std::vector<int64_t>> ids = tok.encode_batch(texts);  // in parallel
  std::vector<InstructionSample> out(conversations.size());
  size_t next = 0;
  for (size_t c = 0; c < conversations.size(); ++c) {
    InstructionSample& s = out[c];
    for (const ChatSegment& seg : conversations[c]) {
      const std::vector<int64_t>& piece = ids[next++];
      s.input_ids.insert(s.input_ids.end(), piece.begin(), piece.end());
      if (seg.trained)
        s.labels.insert(s.labels.end(), piece.begin(), piece.end());
      else
        s.labels.insert(s.labels.end(), piece.size(), kIgnoreIndex);
    }
    if (eod_id >= 0) {
      s.input_ids.push_back(eod_id);
      s.labels.push_back(eod_id);
    }
  }
  return out;
}

void check_template_tokens(const Tokenizer& tok, PromptType type, const std::string& tokenizer_path) {
  check_template_tokens(tok, template_special_tokens(type), prompt_type_name(type), tokenizer_path);
}

void check_template_tokens(const Tokenizer& tok, const std::vector<std::string>& tokens,
                           const std::string& template_name, const std::string& tokenizer_path) {
  for (const std::string& t : tokens) {
    bool added = false;
    for (const AddedToken& a : tok.added_tokens()) added = added || a.content == t;
    TIDAL_CHECK(added, "[data] --prompt-type ", template_name, " writes '", t, "', which the tokenizer ",
                tokenizer_path, " does not hold as an added token (it would be encoded as plain text): use the ",
                "model's own tokenizer.json, or the prompt type of its family");
  }
}

std::vector<std::vector<size_t>> pack_greedy(const std::vector<int64_t>& lengths, int64_t capacity) {
  std::map<int64_t, std::vector<size_t>> by_length;  // the samples of each length, in reading order
  std::multiset<int64_t> left;
  for (size_t i = 0; i < lengths.size(); ++i) {
    TIDAL_CHECK(lengths[i] <= capacity, "[data] sample ", i, " has ", lengths[i], " tokens, more than a pack's ",
                capacity);
    by_length[lengths[i]].push_back(i);
    left.insert(lengths[i]);
  }
  std::vector<std::vector<size_t>> packs;
  while (!left.empty()) {
    std::vector<size_t> pack;
    int64_t room = capacity;
    for (;;) {
      auto it = left.upper_bound(room);  // the longest length <= room (Python's bisect, index - 1)
      if (it == left.begin()) break;
      --it;
      const int64_t n = *it;
      left.erase(it);
      room -= n;
      std::vector<size_t>& same = by_length[n];
      pack.push_back(same.back());  // MindSpeed pops the last index of that length
      same.pop_back();
    }
    packs.push_back(std::move(pack));
  }
  return packs;
}

}  // namespace tidal::data
