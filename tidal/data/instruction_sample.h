#pragma once
// A rendered conversation as token ids and labels (MindSpeed-LLM's instruction data): every segment of the
// chat template is encoded on its own, as LlamaFactory's encode_multiturn does; the tokens of trained
// segments (the assistant replies) keep their ids as labels and every other token's label is -100, which the
// loss ignores. Packing (--pack) puts whole samples into sequences with MindSpeed's greedy knapsack.
#include <cstdint>
#include <string>
#include <vector>

#include "tidal/data/chat_template.h"
#include "tidal/data/tokenizer.h"

namespace tidal::data {

inline constexpr int64_t kIgnoreIndex = -100;  // a label the loss ignores (PyTorch's and Megatron's)

struct InstructionSample {
  std::vector<int64_t> input_ids, labels;  // the same length; labels -100 where not trained
};

// Encodes many conversations in parallel (Tokenizer::encode_batch over all their segments). `eod_id` >= 0
// appends that token, trained, to every sample (MindSpeed's --append-eod).
std::vector<InstructionSample> encode_conversations(const Tokenizer& tok,
                                                    const std::vector<std::vector<ChatSegment>>& conversations,
                                                    int64_t eod_id);

// Throws tidal::Error when the tokenizer does not hold one of the template's special tokens as an added token
// (it would be encoded as plain text, not as the model's control token). `tokenizer_path` names it.
void check_template_tokens(const Tokenizer& tok, PromptType type, const std::string& tokenizer_path);
// The same for the `tokens` a template named `template_name` writes (a --prompt-type-path template's).
void check_template_tokens(const Tokenizer& tok, const std::vector<std::string>& tokens,
                           const std::string& template_name, const std::string& tokenizer_path);

// MindSpeed's greedy knapsack (LlamaFactory's): the lengths sorted, each pack takes the longest remaining
// sample that still fits in `capacity` until none does. Returns each pack's sample indices, in the order
// MindSpeed takes them (of equal lengths, the sample read last goes first). A length above `capacity` throws.
std::vector<std::vector<size_t>> pack_greedy(const std::vector<int64_t>& lengths, int64_t capacity);

}  // namespace tidal::data
