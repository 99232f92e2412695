// libFuzzer target: a --prompt-type-path file of chat templates (tidal::data::template_of, MindSpeed-LLM's
// templates.json format), its template "t" then rendering a fixed conversation with a system turn, a tool call, an
// observation and the record's tools text (tidal::data::render_slots).
//
// Input: the file's JSON text. A template that loads must render, or refuse with a clean error, and never write
// more than its slots' text allows per message.
#include <nlohmann/json.hpp>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/base/json.h"
#include "tidal/data/slot_template.h"
#include "tidal/data/template_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  tidal::fuzz::expect_clean_errors([&] {
    const nlohmann::json doc = tidal::parse_json(text, "[fuzz] template file");
    const tidal::data::SlotTemplate t = tidal::data::template_of(doc, "fuzz.json", "t");
    using tidal::data::Role;
    const std::vector<tidal::data::ChatMessage> messages = {
        {Role::system, "You are terse."},
        {Role::user, "What is 2 + 2?"},
        {Role::function_call, R"({"name": "add", "arguments": {"a": 2, "b": 2}})"},
        {Role::observation, "4"},
        {Role::assistant, "4."}};
    const std::string tools = R"([{"name": "add", "description": "adds", "parameters": {"type": "object"}}])";
    size_t written = 0;
    for (const tidal::data::ChatSegment& s : tidal::data::render_slots(t, messages, {"<s>", "</s>"}, tools))
      written += s.text.size();
    // Each turn writes its formatter's slots (bounded by the file) around at most a few copies of its text.
    if (written > 64 * text.size() + 4096) std::abort();
  });
  return 0;
}
