#pragma once
// Chat templates for instruction data (MindSpeed-LLM's --prompt-type): a conversation rendered exactly as the
// family's published tokenizer_config.json chat_template renders it (apply_chat_template, no generation
// prompt), cut into segments that say which text is trained: every assistant turn's reply and the end-of-turn
// text the template writes after it; everything else (system, user turns, the assistant headers) is masked.
// The golden files of tests/fixtures/chat/ (scripts/chat_fixtures.py, transformers itself) check every byte.
#include <string>
#include <string_view>
#include <vector>

namespace tidal::data {

// qwen: Qwen2.5-Instruct (ChatML with Qwen's default system prompt); chatml: OpenHermes-2.5's plain ChatML;
// llama3: Llama-3.1-Instruct; mistral: Mistral-7B-Instruct-v0.3; gemma: gemma-3-it; deepseek3: DeepSeek-V3;
// alpaca and empty: LlamaFactory's templates of those names (no published model has them).
enum class PromptType { empty, alpaca, chatml, qwen, llama3, mistral, gemma, deepseek3 };

// The --prompt-type spelling; an unknown name throws tidal::Error listing the valid ones.
PromptType parse_prompt_type(std::string_view name);
const char* prompt_type_name(PromptType type);

// function_call: the assistant calling a tool (content: {"name", "arguments"} JSON, or a list), trained as a
// reply; observation: the tool's answer, masked as a user turn (LLaMA-Factory's roles; tidal/data/tool_calls.h).
enum class Role { system, user, assistant, function_call, observation };

struct ChatMessage {
  Role role = Role::user;
  std::string content;
};

struct ChatSegment {
  std::string text;
  bool trained = false;  // an assistant reply (and its end-of-turn text): its tokens keep their labels
};

// Renders `messages`: an optional system message first, then user (or observation) and assistant (or
// function_call) turns alternating, starting with a user turn and ending with an assistant turn (anything else
// throws tidal::Error). `eos_token` is the tokenizer's end-of-sequence text, which only the alpaca template
// writes. `tools` is the record's tools text (a JSON list of functions; tidal/data/tool_calls.h), written into
// the system message. Only qwen (Qwen2.5's tool format) and chatml (MindSpeed's: LLaMA-Factory's default tool
// format) render tools and tool turns; the other prompt types refuse them by name. Neighbouring segments of the
// same kind are merged; concatenated, the segments are the template's rendering.
std::vector<ChatSegment> render_chat(PromptType type, const std::vector<ChatMessage>& messages,
                                     std::string_view eos_token = "<|endoftext|>", std::string_view tools = {});
std::string joined_text(const std::vector<ChatSegment>& segments);

// A conversation checked as render_chat checks it: the system text (null when none) and the turns after it.
struct ChatTurns {
  const std::string* system = nullptr;
  std::vector<const ChatMessage*> turns;
};
ChatTurns split_turns(const std::vector<ChatMessage>& messages);

// The special tokens the template writes, each of which the tokenizer must hold as an added token so that it
// encodes to one id (alpaca's is `eos_token`; empty writes none).
std::vector<std::string> template_special_tokens(PromptType type, std::string_view eos_token = "<|endoftext|>");

}  // namespace tidal::data
