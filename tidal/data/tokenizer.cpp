#include "tidal/data/tokenizer.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/base/parallel.h"
#include "tidal/data/bpe.h"
#include "tidal/data/byte_level.h"
#include "tidal/data/normalizer.h"
#include "tidal/data/pretokenizer.h"
#include "tidal/io/atomic_file.h"

namespace tidal::data {

using json = nlohmann::json;

struct Tokenizer::Impl {
  std::string source;               // the tokenizer.json text, written back by save()
  std::vector<std::string> tokens;  // id -> spelling ("" for an unused id)
  std::vector<std::string> bytes;   // id -> the bytes decode() writes
  std::vector<uint8_t> special;     // id -> an added special token
  StringMap<int32_t> token_ids;     // spelling -> id (added tokens win, as in Hugging Face)
  std::unique_ptr<BpeModel> bpe;
  std::vector<AddedToken> added;
  // What each added token matches: its content, normalized for a "normalized": true token (Hugging Face's
  // AddedVocabulary: those are found in the normalized text, the others in the raw text first).
  std::vector<std::string> match;
  using ByFirstByte = std::array<std::vector<int32_t>, 256>;  // indices into `added`, longest first
  ByFirstByte raw_by_first_byte, normalized_by_first_byte;
  bool any_normalized = false;
  Normalizer normalizer;
  PreTokenizer pretokenizer;
  int64_t num_merges = 0;

  void encode(BpeModel::Session& session, std::string_view text, std::vector<int64_t>& out, bool allow_added) const;
  // The vocabulary's spellings by id (`size` ids, checked) and ids by spelling.
  void set_vocab(const nlohmann::json& vocab, int64_t size);
  // Every id's bytes, then the added tokens over the vocabulary (their ids win), indexed for leftmost-longest
  // matching. After the BPE model is built from the vocabulary alone.
  void set_added(std::vector<AddedToken> added_now);
  // Calls segment(text) for the text between the added tokens of `index` and token(id) for each of them.
  template <typename Segment, typename Token>
  void split_added(std::string_view text, const ByFirstByte& index, Segment&& segment, Token&& token) const;
};

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }
bool is_word_byte(char c) {
  const auto u = static_cast<unsigned char>(c);
  return u >= 0x80 || std::isalnum(u) || c == '_';
}

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  TIDAL_CHECK(in.good(), "[", what, "] cannot open '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

template <typename Segment, typename Token>
void Tokenizer::Impl::split_added(std::string_view text, const ByFirstByte& index, Segment&& segment,
                                  Token&& token) const {
  size_t seg_begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& candidates = index[static_cast<unsigned char>(text[i])];
    for (int32_t c : candidates) {
      const AddedToken& t = added[size_t(c)];
      const std::string& content = match[size_t(c)];
      if (text.compare(i, content.size(), content) != 0) continue;
      size_t begin = i, end = i + content.size();
      if (t.single_word &&
          ((begin > 0 && is_word_byte(text[begin - 1])) || (end < text.size() && is_word_byte(text[end]))))
        continue;
      if (t.lstrip)
        while (begin > seg_begin && is_space(text[begin - 1])) --begin;
      if (t.rstrip)
        while (end < text.size() && is_space(text[end])) ++end;
      if (begin > seg_begin) segment(text.substr(seg_begin, begin - seg_begin));
      token(t.id);
      seg_begin = end;
      i = end - 1;
      break;
    }
  }
  if (seg_begin < text.size()) segment(text.substr(seg_begin));
}

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;
Tokenizer::Tokenizer(const Tokenizer&) = default;
Tokenizer& Tokenizer::operator=(const Tokenizer&) = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

Tokenizer Tokenizer::load(const std::string& path) {
  // A model directory (Hugging Face's layout) holds its tokenizer.json: take that one.
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::string file = (std::filesystem::path(path) / "tokenizer.json").string();
    TIDAL_CHECK(std::filesystem::is_regular_file(file, ec), "[tokenizer] ", path,
                " is a directory without a tokenizer.json: give the tokenizer.json file, or a model directory "
                "that has one");
    return from_json_string(read_text_file(file, "tokenizer"), file);
  }
  return from_json_string(read_text_file(path, "tokenizer"), path);
}

namespace {

// A tokenizer.json's fields, read by their JSON kind; errors name the file and the field, never echo
// a token's text.
struct TokenizerFields {
  std::string origin;
  std::string field(std::string_view path) const {
    return detail::str_cat("[tokenizer] ", origin, " field '", path, "'");
  }
  const json* find(const json& obj, std::string_view key, std::string_view obj_path) const {
    return json_find(obj, key, obj_path.empty() ? "[tokenizer] " + origin : field(obj_path));
  }
  std::string get_string(const json& obj, std::string_view key, std::string_view obj_path, std::string fallback) const {
    const json* v = find(obj, key, obj_path);
    return v == nullptr ? fallback : json_string(*v, field(detail::str_cat(obj_path, ".", key)));
  }
  bool get_bool(const json& obj, std::string_view key, std::string_view obj_path, bool fallback) const {
    const json* v = find(obj, key, obj_path);
    return v == nullptr ? fallback : json_bool(*v, field(detail::str_cat(obj_path, ".", key)));
  }
};

// Token ids: below kMaxTokenId, and the id table (sized by the largest id) at most kMaxUnusedIds
// larger than the entries that fill it, so a 13 KB file cannot ask for a 6 GB table.
constexpr int64_t kMaxTokenId = int64_t(1) << 24;
constexpr int64_t kMaxUnusedIds = 65536;

int64_t token_id(const json& v, const std::string& where) {
  const int64_t id = json_int(v, where);
  TIDAL_CHECK(id >= 0 && id < kMaxTokenId, where, " is ", id, ": token ids must be in [0, ", kMaxTokenId,
              ") (tidal's limit, far above any published vocabulary: docs/reliability.md)");
  return id;
}

// One merge: "a b" (older files) or ["a", "b"] (tokenizers >= 0.20).
std::pair<std::string, std::string> merge_parts(const json& e, const std::string& where) {
  if (e.is_string()) {
    const std::string& s = e.get_ref<const std::string&>();
    const size_t sp = s.find(' ');
    TIDAL_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where,
                " is not two tokens separated by one space");
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  TIDAL_CHECK(e.is_array() && e.size() == 2, where, " must be \"a b\" or [\"a\", \"b\"], found ",
              e.is_array() ? detail::str_cat("an array of ", e.size()) : json_kind(e));
  return {json_string(e[0], where + "[0]"), json_string(e[1], where + "[1]")};
}

// The "model" object, checked to be byte-level BPE without what tidal does not implement.
const json& bpe_model(const json& doc, const TokenizerFields& f, const std::string& where) {
  const json* model_ptr = f.find(doc, "model", "");
  TIDAL_CHECK(model_ptr != nullptr, where, "no \"model\" object; is this a tokenizer.json?");
  const json& model = *model_ptr;
  TIDAL_CHECK(model.is_object(), f.field("model"), " must be an object, found ", json_kind(model));
  TIDAL_CHECK(f.get_string(model, "type", "model", "BPE") == "BPE", f.field("model.type"),
              " is not \"BPE\": only byte-level BPE is supported");
  for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
    TIDAL_CHECK(f.get_string(model, affix, "model", "").empty(), f.field(std::string("model.") + affix),
                " is not supported (byte-level BPE has none)");
  if (const json* dropout = f.find(model, "dropout", "model"))
    TIDAL_CHECK(json_number(*dropout, f.field("model.dropout")) == 0.0, f.field("model.dropout"),
                ": BPE dropout is not supported (it makes encoding random)");
  return model;
}

// The entries of "added_tokens" (an array); `size` grows to cover their ids.
std::vector<AddedToken> read_added_tokens(const json& added_json, const TokenizerFields& f, int64_t& size) {
  std::vector<AddedToken> added(added_json.size());
  for (size_t i = 0; i < added_json.size(); ++i) {
    const std::string at = detail::str_cat("added_tokens[", i, "]");
    const json& a = added_json[i];
    TIDAL_CHECK(a.is_object(), f.field(at), " must be an object, found ", json_kind(a));
    AddedToken& t = added[i];
    const json* id = f.find(a, "id", at);
    TIDAL_CHECK(id != nullptr, f.field(at), " has no id");
    t.id = token_id(*id, f.field(at + ".id"));
    t.content = f.get_string(a, "content", at, "");
    TIDAL_CHECK(!t.content.empty(), f.field(at + ".content"), " must be a non-empty string");
    t.single_word = f.get_bool(a, "single_word", at, false);
    t.lstrip = f.get_bool(a, "lstrip", at, false);
    t.rstrip = f.get_bool(a, "rstrip", at, false);
    t.normalized = f.get_bool(a, "normalized", at, false);
    t.special = f.get_bool(a, "special", at, false);
    size = std::max(size, t.id + 1);
  }
  return added;
}

// "model.merges": each part and their concatenation must be tokens.
std::vector<BpeModel::Merge> bpe_merges(const json& merges_json, const TokenizerFields& f,
                                        const StringMap<int32_t>& token_ids) {
  TIDAL_CHECK(merges_json.is_array(), f.field("model.merges"), " must be an array, found ", json_kind(merges_json));
  std::vector<BpeModel::Merge> merges;
  merges.reserve(merges_json.size());
  for (size_t r = 0; r < merges_json.size(); ++r) {
    const std::string at = f.field(detail::str_cat("model.merges[", r, "]"));
    const auto [a, b] = merge_parts(merges_json[r], at);
    auto ia = token_ids.find(a), ib = token_ids.find(b), iab = token_ids.find(a + b);
    TIDAL_CHECK(ia != token_ids.end() && ib != token_ids.end() && iab != token_ids.end(), at, ": ",
                (ia == token_ids.end()   ? "its first part"
                 : ib == token_ids.end() ? "its second part"
                                         : "the two parts joined"),
                " is not in the vocabulary");
    merges.push_back({ia->second, ib->second, iab->second});
  }
  return merges;
}

}  // namespace

void Tokenizer::Impl::set_vocab(const json& vocab, int64_t size) {
  tokens.assign(size_t(size), std::string());
  token_ids.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    const int64_t id = id_json.get<int64_t>();
    tokens[size_t(id)] = token;
    token_ids[token] = int32_t(id);
  }
}

void Tokenizer::Impl::set_added(std::vector<AddedToken> added_now) {
  bytes.resize(tokens.size());
  for (size_t id = 0; id < tokens.size(); ++id) bytes[id] = symbols_to_bytes(tokens[id]);
  special.assign(tokens.size(), 0);
  for (AddedToken& t : added_now) {
    tokens[size_t(t.id)] = t.content;
    bytes[size_t(t.id)] = symbols_to_bytes(t.content);
    special[size_t(t.id)] = t.special;
    token_ids[t.content] = int32_t(t.id);
    added.push_back(std::move(t));
  }
  // Leftmost-longest matching: at each position try the longest candidate first. A normalized token is
  // matched by its normalized content in the normalized text (normalizer set before).
  match.clear();
  for (size_t i = 0; i < added.size(); ++i) {
    std::string scratch;
    match.push_back(added[i].normalized ? std::string(normalizer.apply(added[i].content, scratch)) : added[i].content);
    if (match.back().empty()) continue;  // normalized to nothing: never matched
    any_normalized = any_normalized || added[i].normalized;
    ByFirstByte& index = added[i].normalized ? normalized_by_first_byte : raw_by_first_byte;
    index[static_cast<unsigned char>(match.back()[0])].push_back(int32_t(i));
  }
  for (ByFirstByte* index : {&raw_by_first_byte, &normalized_by_first_byte})
    for (auto& list : *index)
      std::stable_sort(list.begin(), list.end(),
                       [&](int32_t x, int32_t y) { return match[size_t(x)].size() > match[size_t(y)].size(); });
}

Tokenizer Tokenizer::from_json_string(const std::string& text, const std::string& origin) {
  auto m = std::make_shared<Impl>();
  const TokenizerFields f{origin};
  const std::string where = "[tokenizer] " + origin + ": ";
  const json doc = parse_json(text, "[tokenizer] " + origin);
  TIDAL_CHECK(doc.is_object(), where, "must hold a JSON object, found ", json_kind(doc));
  const json& model = bpe_model(doc, f, where);

  const json* normalizer = f.find(doc, "normalizer", "");
  m->normalizer = Normalizer::from_json(normalizer ? *normalizer : json(), "[tokenizer] " + origin);
  const json* pretokenizer = f.find(doc, "pre_tokenizer", "");
  m->pretokenizer = PreTokenizer::from_json(pretokenizer ? *pretokenizer : json(), "[tokenizer] " + origin);
  TIDAL_CHECK(m->pretokenizer.has_byte_level(), where,
              "the pre_tokenizer has no ByteLevel step; only byte-level BPE vocabularies are supported");

  // Vocabulary (spelling -> id) and added tokens; ids are checked before the id table is sized.
  const json* vocab_ptr = f.find(model, "vocab", "model");
  TIDAL_CHECK(vocab_ptr != nullptr && vocab_ptr->is_object(), f.field("model.vocab"),
              " must be an object of token -> id, found ", vocab_ptr ? json_kind(*vocab_ptr) : "nothing");
  const json& vocab = *vocab_ptr;
  static const json kNone = json::array();
  const json* added_ptr = f.find(doc, "added_tokens", "");
  const json& added_json = added_ptr ? *added_ptr : kNone;
  TIDAL_CHECK(added_json.is_array(), f.field("added_tokens"), " must be an array, found ", json_kind(added_json));
  const std::string vocab_id = "[tokenizer] " + origin + ": an id in field 'model.vocab'";
  int64_t size = 0;
  for (const auto& [token, id_json] : vocab.items()) size = std::max(size, token_id(id_json, vocab_id) + 1);
  std::vector<AddedToken> added = read_added_tokens(added_json, f, size);
  const int64_t entries = int64_t(vocab.size() + added.size());
  TIDAL_CHECK(size <= entries + kMaxUnusedIds, where, "the largest token id is ", size - 1, " but there are only ",
              entries, " tokens: more than ", kMaxUnusedIds,
              " ids would be unused (a corrupted file? docs/reliability.md)");
  m->set_vocab(vocab, size);

  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    auto it = m->token_ids.find(byte_to_symbol(uint8_t(b)));
    byte_ids[size_t(b)] = it == m->token_ids.end() ? -1 : it->second;
  }
  int32_t unk_id = -1;
  if (const json* unk = f.find(model, "unk_token", "model"); unk != nullptr && unk->is_string()) {
    auto it = m->token_ids.find(unk->get_ref<const std::string&>());
    TIDAL_CHECK(it != m->token_ids.end(), f.field("model.unk_token"), " is not in the vocabulary");
    unk_id = it->second;
  }
  const json* merges_ptr = f.find(model, "merges", "model");
  std::vector<BpeModel::Merge> merges = bpe_merges(merges_ptr ? *merges_ptr : kNone, f, m->token_ids);
  m->num_merges = int64_t(merges.size());

  StringMap<int32_t> whole_pieces;
  if (f.get_bool(model, "ignore_merges", "model", false))
    for (const auto& [token, id] : m->token_ids) whole_pieces.emplace(symbols_to_bytes(token), id);
  m->bpe = std::make_unique<BpeModel>(byte_ids, merges, unk_id, std::move(whole_pieces));
  m->set_added(std::move(added));
  m->source = text;
  return Tokenizer(std::move(m));
}

std::string Tokenizer::to_json_string() const {
  TIDAL_CHECK(impl_ != nullptr, "[tokenizer] save of an empty tokenizer");
  return impl_->source;
}

void Tokenizer::save(const std::string& path) const {
  const std::string text = to_json_string();
  io::write_atomically(path, [&](int fd) { io::write_all(fd, text.data(), text.size(), path); });
}

void Tokenizer::encode_into(std::string_view text, std::vector<int64_t>& out, bool allow_added) const {
  TIDAL_CHECK(impl_ != nullptr, "[tokenizer] encode with an empty tokenizer (load or train one first)");
  BpeModel::Session session(*impl_->bpe);
  impl_->encode(session, text, out, allow_added);
}

std::vector<std::vector<int64_t>> Tokenizer::encode_batch(const std::vector<std::string_view>& texts,
                                                          bool allow_added) const {
  TIDAL_CHECK(impl_ != nullptr, "[tokenizer] encode with an empty tokenizer (load or train one first)");
  std::vector<std::vector<int64_t>> out(texts.size());
  // One cache session per thread's chunk: publishing new pieces takes the cache's write lock, once.
  parallel_for(0, int64_t(texts.size()), 1, [&](int64_t b, int64_t e) {
    BpeModel::Session session(*impl_->bpe);
    for (int64_t i = b; i < e; ++i) impl_->encode(session, texts[size_t(i)], out[size_t(i)], allow_added);
  });
  return out;
}

void Tokenizer::Impl::encode(BpeModel::Session& session, std::string_view text, std::vector<int64_t>& out,
                             bool allow_added) const {
  const Impl& m = *this;
  std::string scratch;
  const PreTokenizer::Sink sink = [&](std::string_view piece) { session.encode_piece(piece, out); };
  auto pieces = [&](std::string_view normalized) { m.pretokenizer.split(normalized, sink); };
  auto token = [&](int64_t id) { out.push_back(id); };
  // Hugging Face's order: the raw text split on the tokens that are not normalized, each segment
  // normalized, then split on the normalized ones.
  auto segment = [&](std::string_view seg) {
    const std::string_view normalized = m.normalizer.apply(seg, scratch);
    if (allow_added && m.any_normalized)
      m.split_added(normalized, m.normalized_by_first_byte, pieces, token);
    else
      pieces(normalized);
  };
  if (allow_added && !m.added.empty())
    m.split_added(text, m.raw_by_first_byte, segment, token);
  else
    segment(text);
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 8);
  encode_into(text, ids, true);
  return ids;
}

std::vector<int64_t> Tokenizer::encode_ordinary(std::string_view text) const {
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 8);
  encode_into(text, ids, false);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special) const {
  TIDAL_CHECK(impl_ != nullptr, "[tokenizer] decode with an empty tokenizer");
  const Impl& m = *impl_;
  std::string out;
  for (int64_t id : ids) {
    TIDAL_CHECK(id >= 0 && id < int64_t(m.bytes.size()), "[tokenizer] decode: id ", id, " is not in [0, ",
                m.bytes.size(), ")");
    if (skip_special && m.special[size_t(id)]) continue;
    out += m.bytes[size_t(id)];
  }
  return out;
}

int64_t Tokenizer::vocab_size() const { return impl_ ? int64_t(impl_->tokens.size()) : 0; }
int64_t Tokenizer::num_merges() const { return impl_ ? impl_->num_merges : 0; }

int64_t Tokenizer::eod_id() const {
  // GPT-2, Qwen and tidal's own; Llama 3; Llama 2 and Mistral; Gemma; DeepSeek-V3.
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<｜end▁of▁sentence｜>"})
    if (auto id = token_to_id(name)) return *id;
  TIDAL_CHECK(false, "[tokenizer] this tokenizer has none of the end-of-document tokens <|endoftext|>, ",
              "<|end_of_text|>, </s>, <eos>, <｜end▁of▁sentence｜>");
  return -1;
}

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  if (!impl_) return std::nullopt;
  auto it = impl_->token_ids.find(token);
  if (it == impl_->token_ids.end()) return std::nullopt;
  return it->second;
}

std::string Tokenizer::id_to_token(int64_t id) const {
  if (!impl_ || id < 0 || id >= int64_t(impl_->tokens.size())) return {};
  return impl_->tokens[size_t(id)];
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  static const std::vector<AddedToken> none;
  return impl_ ? impl_->added : none;
}

}  // namespace tidal::data
