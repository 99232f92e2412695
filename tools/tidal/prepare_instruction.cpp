// `tidal prepare --handler-name ...`: instruction data (Alpaca- or ShareGPT-style JSON Lines) rendered with a
// chat template, tokenized in parallel and written as MindSpeed-LLM writes it: PREFIX_packed_input_ids_document,
// PREFIX_packed_attention_mask_document and PREFIX_packed_labels_document (.bin / .idx, int32; labels -100 where
// a token is not trained). --pack --seq-length N packs whole samples into sequences of N (MindSpeed's greedy
// knapsack over N - 1 tokens, padded to N); --neat-pack writes each token's sample in its pack (1, 2, ...; 0 for
// the padding) as the attention mask, as MindSpeed does.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "tidal/base/error.h"
#include "tidal/base/flags.h"
#include "tidal/data/chat_template.h"
#include "tidal/data/indexed_dataset.h"
#include "tidal/data/instruction_record.h"
#include "tidal/data/instruction_sample.h"
#include "tidal/data/jsonl.h"
#include "tidal/data/slot_template.h"
#include "tidal/data/template_file.h"
#include "tidal/data/tokenizer.h"
#include "tools/tidal/cli.h"
#include "tools/tidal/data_commands.h"
#include "tools/tidal/prepare_progress.h"

namespace tidal::cli {
namespace {

// MindSpeed's three datasets, in its order.
constexpr const char* kKeys[3] = {"input_ids", "attention_mask", "labels"};

struct InstructionOutput {
  std::unique_ptr<data::IndexedDatasetWriter> writers[3];
  std::string prefixes[3];

  explicit InstructionOutput(const std::string& prefix) {
    for (int k = 0; k < 3; ++k) {
      prefixes[k] = prefix + "_packed_" + kKeys[k] + "_document";  // MindSpeed's {prefix}_packed_{key}_document
      writers[k] = std::make_unique<data::IndexedDatasetWriter>(prefixes[k], data::TokenDType::i32);
    }
  }
  // One sample (or one pack) as one document of each dataset; the attention mask is all ones (MindSpeed's
  // without --neat-pack) unless `mask` is given.
  void add(const std::vector<int64_t>& ids, const std::vector<int64_t>& labels, const std::vector<int64_t>& mask = {}) {
    writers[0]->add_document(ids);
    writers[1]->add_document(mask.empty() ? std::vector<int64_t>(ids.size(), 1) : mask);
    writers[2]->add_document(labels);
  }
};

// The text of a --prompt-type-path template's bos / eos slots. tidal reads no tokenizer_config.json: the bos is
// the first of the usual BOS tokens the tokenizer holds, the eos its end-of-document token (stop_words[0] under
// replace_eos, as MindSpeed's fix_model_tokenizer makes it).
data::SpecialTexts special_texts(const data::SlotTemplate& t, const data::Tokenizer& tok) {
  data::SpecialTexts s;
  for (const char* bos : {"<|begin_of_text|>", "<s>", "<bos>", "<｜begin▁of▁sentence｜>"})
    if (s.bos.empty() && tok.token_to_id(bos)) s.bos = bos;
  bool writes_eos = false;
  for (const data::Formatter* f :
       {&t.user, &t.assistant, &t.system, &t.function, &t.observation, &t.separator, &t.prefix})
    for (const data::Slot& slot : *f) writes_eos = writes_eos || slot.kind == data::Slot::Kind::eos;
  if (t.replace_eos)
    s.eos = t.stop_words.at(0);
  else if (writes_eos)
    s.eos = tok.id_to_token(tok.eod_id());
  return s;
}

struct Counts {
  int64_t samples = 0, trained_tokens = 0, dropped = 0, truncated = 0;
};

}  // namespace

int prepare_instruction(const Flags& a, const std::vector<std::string>& files) {
  for (const std::string& f : files)
    TIDAL_CHECK(data::is_json_lines(f), "tidal prepare: --handler-name reads JSON Lines (.jsonl, .json, .gz); '", f,
                "' is not one");
  TIDAL_CHECK(!a.has("json-keys"), "tidal prepare: --json-keys is for pretraining data: an instruction handler ",
              "writes input_ids, attention_mask and labels (name the record's keys with --map-keys)");
  TIDAL_CHECK(!a.has("dtype"), "tidal prepare: instruction data is int32 (labels hold -100): drop --dtype");
  TIDAL_CHECK(a.has("prompt-type"), "tidal prepare: --handler-name needs --prompt-type (",
              "qwen, llama3, chatml, mistral, gemma, deepseek3, alpaca or empty: the model family's chat template; ",
              "or a template of --prompt-type-path FILE)");
  const data::InstructionFormat format = data::parse_handler_name(a.str("handler-name"));
  const data::InstructionKeys keys = data::parse_map_keys(format, a.str("map-keys"));
  // --prompt-type-path: the template comes from that file (MindSpeed's templates.json), not tidal's table.
  const std::string template_path = a.str("prompt-type-path");
  std::optional<data::SlotTemplate> from_file;
  if (!template_path.empty()) from_file = data::load_template_file(template_path, a.str("prompt-type"));
  std::optional<data::PromptType> builtin;
  if (!from_file) builtin = data::parse_prompt_type(a.str("prompt-type"));
  const std::string template_name =
      from_file ? a.str("prompt-type") + " of " + template_path : std::string(data::prompt_type_name(*builtin));
  const bool pack = a.flag_on("pack"), neat = a.flag_on("neat-pack");
  TIDAL_CHECK(!neat || pack, "tidal prepare: --neat-pack needs --pack --seq-length N (it marks the samples of a pack)");
  const int64_t seq_length = a.has("seq-length") ? a.integer("seq-length", 0, 2, int64_t(1) << 30) : 0;
  TIDAL_CHECK(!pack || seq_length > 0, "tidal prepare: --pack needs --seq-length N (the packed sequences' length)");
  const std::string policy = a.str("on-bad-line", "fail");
  TIDAL_CHECK(policy == "fail" || policy == "skip", "tidal prepare: --on-bad-line must be fail or skip, got '", policy,
              "'");
  const std::string tokenizer_path = a.str("tokenizer");
  const data::Tokenizer tok = data::Tokenizer::load(tokenizer_path);
  data::SpecialTexts special;
  if (from_file) {
    special = special_texts(*from_file, tok);
    data::check_template_tokens(tok, data::slot_template_tokens(*from_file, special), template_name, tokenizer_path);
  } else {
    data::check_template_tokens(tok, *builtin, tokenizer_path);
  }
  const int64_t eod_id = a.flag_on("append-eod") ? tok.eod_id() : -1;
  // Pad tokens come after every real token of a pack and are never trained: their id changes no loss.
  const int64_t pad_id = tok.token_to_id("<|endoftext|>").value_or(0);

  const auto start = std::chrono::steady_clock::now();
  InstructionOutput out(a.str("output-prefix"));
  data::JsonlCounts jsonl;
  Counts n;
  std::vector<std::vector<data::ChatSegment>> pending;
  std::vector<data::InstructionSample> kept;  // --pack: every sample, packed at the end
  auto flush = [&] {
    for (data::InstructionSample& s : data::encode_conversations(tok, pending, eod_id)) {
      const int64_t len = int64_t(s.input_ids.size());
      if (pack && len > seq_length - 1) {  // MindSpeed keeps one token of every pack for padding
        s.input_ids.resize(size_t(seq_length - 1));
        s.labels.resize(size_t(seq_length - 1));
        ++n.truncated;
      } else if (!pack && seq_length > 0 && len >= seq_length) {
        ++n.dropped;  // MindSpeed drops a sample of --seq-length tokens or more
        continue;
      }
      for (int64_t l : s.labels) n.trained_tokens += l != data::kIgnoreIndex ? 1 : 0;
      ++n.samples;
      if (pack)
        kept.push_back(std::move(s));
      else
        out.add(s.input_ids, s.labels);
    }
    pending.clear();
  };
  std::vector<data::ChatMessage> messages;
  std::string tools;
  const data::BadLine bad = policy == "skip" ? data::BadLine::skip : data::BadLine::fail;
  PrepareProgress progress("records", log_interval(a), 0);
  int64_t text_bytes = 0;
  for (const std::string& path : files)
    naming_oom("preparing " + input_named(path), [&] {
      data::for_each_json_object(path, bad, jsonl, [&](const nlohmann::json& record) {
        std::string wrong = data::conversation_of(record, keys, messages, &tools);
        if (!wrong.empty()) return wrong;
        try {  // what the template cannot render (a tool turn, a tool without parameters) is this record's fault
          pending.push_back(from_file ? data::render_slots(*from_file, messages, special, tools)
                                      : data::render_chat(*builtin, messages, "<|endoftext|>", tools));
        } catch (const Error& e) {
          return std::string(e.what());
        }
        for (const data::ChatSegment& segment : pending.back()) text_bytes += int64_t(segment.text.size());
        if (pending.size() >= 4096) {
          flush();
          progress.update(jsonl.records, text_bytes);  // the rendered conversations' text
        }
        return std::string();
      });
    });
  progress.clear();
  flush();
  int64_t packs = 0;
  if (pack) {
    std::vector<int64_t> lengths;
    for (const data::InstructionSample& s : kept) lengths.push_back(int64_t(s.input_ids.size()));
    for (const std::vector<size_t>& members : data::pack_greedy(lengths, seq_length - 1)) {
      std::vector<int64_t> ids, labels, samples;
      for (size_t i : members) {
        ids.insert(ids.end(), kept[i].input_ids.begin(), kept[i].input_ids.end());
        labels.insert(labels.end(), kept[i].labels.begin(), kept[i].labels.end());
        if (neat) samples.resize(ids.size(), int64_t(samples.empty() ? 1 : samples.back() + 1));
      }
      ids.resize(size_t(seq_length), pad_id);
      labels.resize(size_t(seq_length), data::kIgnoreIndex);
      if (neat) samples.resize(size_t(seq_length), 0);  // the padding is sample 0
      out.add(ids, labels, samples);
      ++packs;
    }
  }
  TIDAL_CHECK(out.writers[0]->num_documents() > 0, "tidal prepare: no usable record in the inputs (", jsonl.records,
              " records read, ", jsonl.bad, " skipped, ", n.dropped, " dropped as too long)");
  for (auto& w : out.writers) w->finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu files -> %lld records (%s, --prompt-type %s)", files.size(), (long long)jsonl.records,
              data::handler_name(format), template_name.c_str());
  if (jsonl.bad > 0)
    std::printf(", %lld malformed records skipped (the first: %s)", (long long)jsonl.bad, jsonl.first_bad.c_str());
  if (jsonl.blank > 0) std::printf(", %lld blank lines", (long long)jsonl.blank);
  std::printf(" in %.2f s\n", seconds);
  std::printf("  %lld samples, %lld tokens, %lld of them trained", (long long)n.samples,
              (long long)out.writers[0]->num_tokens(), (long long)n.trained_tokens);
  if (n.dropped > 0)
    std::printf("; %lld samples of %lld tokens or more dropped", (long long)n.dropped, (long long)seq_length);
  if (pack)
    std::printf("; packed into %lld %ssequences of %lld tokens", (long long)packs, neat ? "neat " : "",
                (long long)seq_length);
  if (n.truncated > 0)
    std::printf("; warning: %lld samples longer than %lld tokens truncated", (long long)n.truncated,
                (long long)(seq_length - 1));
  std::printf("\n");
  for (const std::string& p : out.prefixes) std::printf("  wrote %s.bin and %s.idx\n", p.c_str(), p.c_str());
  if (pack && !neat && eod_id < 0)  // MindSpeed's rule: the reset flags find the samples by their EOD
    std::printf(
        "  note: without --append-eod the packed samples are not separated by an EOD token, so "
        "tidal train --reset-position-ids / --reset-attention-mask see each pack as one sequence (--neat-pack "
        "marks them without one)\n");
  return kOk;
}

}  // namespace tidal::cli
