#include "tidal/data/chat_template.h"

#include <array>
#include <cstdint>
#include <initializer_list>
#include <utility>

#include "tidal/base/error.h"
#include "tidal/data/tool_calls.h"

namespace tidal::data {
namespace {

constexpr std::array<std::pair<PromptType, const char*>, 8> kNames{{{PromptType::empty, "empty"},
                                                                    {PromptType::alpaca, "alpaca"},
                                                                    {PromptType::chatml, "chatml"},
                                                                    {PromptType::qwen, "qwen"},
                                                                    {PromptType::llama3, "llama3"},
                                                                    {PromptType::mistral, "mistral"},
                                                                    {PromptType::gemma, "gemma"},
                                                                    {PromptType::deepseek3, "deepseek3"}}};

// Python's str.isspace() over one code point (what jinja's `trim`, str.strip(), removes): the ASCII
// whitespace, the separators \x1c-\x1f, NEL, NBSP and Unicode's space separators.
bool is_python_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

// The code point starting at s[i] and its byte length (an invalid byte is itself, length 1: never a space).
std::pair<uint32_t, size_t> code_point_at(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  const size_t n = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xe ? 3 : (b >> 3) == 0x1e ? 4 : 0;
  if (n <= 1 || i + n > s.size()) return {n == 1 ? b : 0xffffffffu, 1};
  uint32_t c = b & (0x7f >> n);
  for (size_t k = 1; k < n; ++k) {
    const auto cb = static_cast<unsigned char>(s[i + k]);
    if ((cb & 0xc0) != 0x80) return {0xffffffffu, 1};
    c = (c << 6) | (cb & 0x3f);
  }
  return {c, n};
}

// jinja's `trim` filter: Python's str.strip().
std::string trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    const auto [c, n] = code_point_at(s, begin);
    if (!is_python_space(c)) break;
    begin += n;
  }
  size_t end = begin;  // the end of the last non-space code point
  for (size_t i = begin; i < s.size();) {
    const auto [c, n] = code_point_at(s, i);
    i += n;
    if (!is_python_space(c)) end = i;
  }
  return std::string(s.substr(begin, end - begin));
}

// DeepSeek's template keeps only what follows the last "</think>" of an assistant reply.
std::string after_think(const std::string& s) {
  const size_t at = s.rfind("</think>");
  return at == std::string::npos ? s : s.substr(at + 8);
}

// The parts back to back (instead of chains of operator+, which GCC 12 misreads under -Werror=restrict).
std::string join(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out += p;
  return out;
}

class Segments {
 public:
  void masked(std::string_view text) { add(text, false); }
  void trained(std::string_view text) { add(text, true); }
  std::vector<ChatSegment> take() { return std::move(out_); }

 private:
  void add(std::string_view text, bool trained) {
    if (text.empty()) return;
    if (!out_.empty() && out_.back().trained == trained)
      out_.back().text += text;
    else
      out_.push_back({std::string(text), trained});
  }
  std::vector<ChatSegment> out_;
};

const char* role_name(Role r) {
  switch (r) {
    case Role::system: return "system";
    case Role::user: return "user";
    case Role::assistant: return "assistant";
    case Role::function_call: return "function_call";
    case Role::observation: return "observation";
  }
  return "";
}

bool is_reply(Role r) { return r == Role::assistant || r == Role::function_call; }

// The calls of a function_call turn (a malformed one throws: conversation_of reports it by line first).
std::vector<FunctionCall> calls_of(const ChatMessage& m) {
  std::vector<FunctionCall> calls;
  const std::string wrong = parse_function_calls(m.content, calls);
  TIDAL_CHECK(wrong.empty(), "[chat] ", wrong);
  return calls;
}

}  // namespace

PromptType parse_prompt_type(std::string_view name) {
  std::string valid;
  for (const auto& [type, spelling] : kNames) {
    if (name == spelling) return type;
    valid += valid.empty() ? "" : ", ";
    valid += spelling;
  }
  tidal::detail::throw_error(tidal::detail::str_cat("[chat] unknown --prompt-type '", name, "': tidal has ", valid));
}

const char* prompt_type_name(PromptType type) {
  for (const auto& [t, spelling] : kNames)
    if (t == type) return spelling;
  TIDAL_ASSERT(false, "unknown PromptType");
  return "";
}

std::vector<ChatSegment> render_chat(PromptType type, const std::vector<ChatMessage>& messages,
                                     std::string_view eos_token, std::string_view tools_text) {
  const auto [system, turns] = split_turns(messages);
  std::vector<nlohmann::ordered_json> tools;
  const std::string wrong_tools = parse_tools(tools_text, tools);
  TIDAL_CHECK(wrong_tools.empty(), "[chat] ", wrong_tools);
  if (type != PromptType::qwen && type != PromptType::chatml) {
    bool tool_turns = !tools.empty();
    for (const ChatMessage* m : turns)
      tool_turns = tool_turns || m->role == Role::function_call || m->role == Role::observation;
    TIDAL_CHECK(!tool_turns, "[chat] --prompt-type ", prompt_type_name(type), " has no tool format: tools, ",
                "function_call and observation turns render with qwen or chatml, or with a --prompt-type-path ",
                "template");
  }
  Segments s;
  switch (type) {
    case PromptType::qwen:
      // Qwen2.5's chat_template: tools follow the system text (Qwen's default one when there is none); a call is
      // an assistant turn of <tool_call> blocks; an observation a user turn of <tool_response>.
      if (!tools.empty())
        s.masked(join({"<|im_start|>system\n",
                       system != nullptr ? std::string_view(*system)
                                         : "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
                       qwen_tools_text(tools), "<|im_end|>\n"}));
      else if (system != nullptr)
        s.masked(join({"<|im_start|>system\n", *system, "<|im_end|>\n"}));
      else
        s.masked(
            "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n");
      for (const ChatMessage* m : turns) {
        if (m->role == Role::user) {
          s.masked(join({"<|im_start|>user\n", m->content, "<|im_end|>\n"}));
        } else if (m->role == Role::observation) {
          s.masked(join({"<|im_start|>user\n<tool_response>\n", m->content, "\n</tool_response><|im_end|>\n"}));
        } else {
          s.masked("<|im_start|>assistant\n");
          const std::string reply = m->role == Role::assistant ? m->content : qwen_function_text(calls_of(*m));
          s.trained(join({reply, "<|im_end|>\n"}));
        }
      }
      break;
    case PromptType::chatml:
      // MindSpeed's chatml template: LLaMA-Factory's default tool format after the system text, a call as
      // "Action: NAME\nAction Input: ARGS", an observation as a "tool" turn.
      if (system != nullptr || !tools.empty())
        s.masked(join({"<|im_start|>system\n", system != nullptr ? std::string_view(*system) : std::string_view(),
                       tools.empty() ? std::string() : default_tools_text(tools), "<|im_end|>\n"}));
      for (const ChatMessage* m : turns) {
        if (m->role == Role::user || m->role == Role::observation) {
          s.masked(
              join({m->role == Role::user ? "<|im_start|>user\n" : "<|im_start|>tool\n", m->content, "<|im_end|>\n"}));
        } else {
          s.masked("<|im_start|>assistant\n");
          std::string reply = m->content;
          if (m->role == Role::function_call) {
            const auto [name, arguments] = name_and_arguments(calls_of(*m));
            reply = join({"Action: ", name, "\nAction Input: ", arguments});
          }
          s.trained(join({reply, "<|im_end|>\n"}));
        }
      }
      break;
    case PromptType::llama3:
      // Llama 3.1 always writes a system header with its knowledge cut-off and the template's fixed date.
      s.masked(
          join({"<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: "
                "December 2023\nToday Date: 26 Jul 2024\n\n",
                system != nullptr ? trim(*system) : std::string(), "<|eot_id|>"}));
      for (const ChatMessage* m : turns) {
        if (m->role == Role::user) {
          s.masked(join({"<|start_header_id|>user<|end_header_id|>\n\n", trim(m->content), "<|eot_id|>"}));
        } else {
          s.masked("<|start_header_id|>assistant<|end_header_id|>\n\n");
          s.trained(join({trim(m->content), "<|eot_id|>"}));
        }
      }
      break;
    case PromptType::mistral:
      // Mistral v0.3 writes the system message into the last user turn only when that turn ends the
      // conversation, which a training conversation (ending with a reply) never does: the system is dropped.
      s.masked("<s>");
      for (const ChatMessage* m : turns) {
        if (m->role == Role::user)
          s.masked(join({"[INST] ", m->content, "[/INST]"}));
        else
          s.trained(join({" ", trim(m->content), "</s>"}));
      }
      break;
    case PromptType::gemma:
      // Gemma has no system role: the system text opens the first user turn.
      s.masked("<bos>");
      for (size_t i = 0; i < turns.size(); ++i) {
        const ChatMessage* m = turns[i];
        if (m->role == Role::user) {
          const std::string prefix = (i == 0 && system != nullptr) ? join({*system, "\n\n"}) : std::string();
          s.masked(join({"<start_of_turn>user\n", prefix, trim(m->content), "<end_of_turn>\n"}));
        } else {
          s.masked("<start_of_turn>model\n");
          s.trained(join({trim(m->content), "<end_of_turn>\n"}));
        }
      }
      break;
    case PromptType::deepseek3:
      s.masked(join({"<｜begin▁of▁sentence｜>", system != nullptr ? std::string_view(*system) : std::string_view()}));
      for (const ChatMessage* m : turns) {
        if (m->role == Role::user) {
          s.masked(join({"<｜User｜>", m->content}));
        } else {
          s.masked("<｜Assistant｜>");
          s.trained(join({after_think(m->content), "<｜end▁of▁sentence｜>"}));
        }
      }
      break;
    case PromptType::alpaca:
      s.masked(system != nullptr ? *system
                                 : std::string("Below is an instruction that describes a task. Write a response that "
                                               "appropriately completes the request.\n\n"));
      for (const ChatMessage* m : turns) {
        if (m->role == Role::user)
          s.masked(join({"### Instruction:\n", m->content, "\n\n### Response:\n"}));
        else
          s.trained(join({m->content, eos_token, "\n\n"}));
      }
      break;
    case PromptType::empty:
      if (system != nullptr) s.masked(*system);
      for (const ChatMessage* m : turns) (m->role == Role::user ? s.masked(m->content) : s.trained(m->content));
      break;
  }
  return s.take();
}

// User (or observation) and assistant (or function_call) turns alternating, starting with user and ending with
// a reply.
ChatTurns split_turns(const std::vector<ChatMessage>& messages) {
  const bool has_system = !messages.empty() && messages[0].role == Role::system;
  std::vector<const ChatMessage*> turns;
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const bool reply = turns.size() % 2 == 1;
    const Role r = messages[i].role;
    TIDAL_CHECK(r != Role::system && is_reply(r) == reply, "[chat] message ", i, " is a ", role_name(r), " turn where ",
                reply ? "an assistant (or function_call)" : "a user (or observation)",
                " turn belongs: after an optional system message, a conversation alternates user and assistant "
                "turns");
    turns.push_back(&messages[i]);
  }
  TIDAL_CHECK(!turns.empty() && turns.size() % 2 == 0, "[chat] a conversation needs user/assistant pairs ending with ",
              "an assistant reply (the trained text); got ", turns.size(), " turns after the system message");
  return {has_system ? &messages[0].content : nullptr, std::move(turns)};
}

std::string joined_text(const std::vector<ChatSegment>& segments) {
  std::string out;
  for (const ChatSegment& seg : segments) out += seg.text;
  return out;
}

std::vector<std::string> template_special_tokens(PromptType type, std::string_view eos_token) {
  switch (type) {
    case PromptType::qwen:
    case PromptType::chatml: return {"<|im_start|>", "<|im_end|>"};
    case PromptType::llama3: return {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"};
    case PromptType::mistral: return {"<s>", "</s>", "[INST]", "[/INST]"};
    case PromptType::gemma: return {"<bos>", "<start_of_turn>", "<end_of_turn>"};
    case PromptType::deepseek3:
      return {"<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>"};
    case PromptType::alpaca: return {std::string(eos_token)};
    case PromptType::empty: return {};
  }
  return {};
}

}  // namespace tidal::data
