// libFuzzer target: an instruction record of `tidal prepare --handler-name` (tidal::data::conversation_of) rendered
// by a chat template (tidal::data::render_chat), with a --map-keys document beside it.
//
// Input layout: one flag byte (bit 0: ShareGPT, else Alpaca; bits 1-3: the prompt type, 0-7 in PromptType's
// order; bit 4: the next line is a --map-keys JSON object), then, with bit 4, the map line up to the first '\n',
// then the record's JSON text (with --map-keys '{"tools": ...}' its tools column too). The rendering must hold every
// message's text.
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/base/json.h"
#include "tidal/data/chat_template.h"
#include "tidal/data/instruction_record.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t flags = data[0];
  std::string rest(reinterpret_cast<const char*>(data + 1), size - 1);
  std::string map;
  if (flags & 16) {
    const size_t nl = rest.find('\n');
    map = rest.substr(0, nl);
    rest = nl == std::string::npos ? std::string() : rest.substr(nl + 1);
  }
  const auto format = (flags & 1) ? tidal::data::InstructionFormat::sharegpt : tidal::data::InstructionFormat::alpaca;
  const auto type = static_cast<tidal::data::PromptType>((flags >> 1) & 7);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::data::InstructionKeys keys = tidal::data::parse_map_keys(format, map);
    const nlohmann::json record = tidal::parse_json(rest, "[fuzz] record");
    std::vector<tidal::data::ChatMessage> messages;
    std::string tools;
    if (!tidal::data::conversation_of(record, keys, messages, &tools).empty()) return;  // a bad record: by line
    // What a template cannot render (tool turns without a tool format) is a clean error, as prepare reports it.
    const std::string text = tidal::data::joined_text(tidal::data::render_chat(type, messages, "<|endoftext|>", tools));
    size_t total = 0;
    for (const tidal::data::ChatMessage& m : messages) total += m.content.size();
    // Templates trim some messages (llama3, gemma) or keep only a reply's tail (deepseek3's </think>), and add
    // fixed text around each; they never write more than that per message.
    // A call's JSON is written again (Python's spacing: at most 3 bytes per byte of the call) and the tools
    // text lists each tool's fields (at most 4x the column plus a fixed text).
    if (text.size() > 3 * total + 4 * tools.size() + 512 * (messages.size() + 1)) std::abort();
  });
  return 0;
}
