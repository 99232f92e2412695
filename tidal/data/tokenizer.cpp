#include "tidal/data/tokenizer.h"

#include <array>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/base/parallel.h"
#include "tidal/data/bpe.h"
#include "tidal/data/byte_level.h"
#include "tidal/data/normalizer.h"
#include "tidal/data/pretokenizer.h"

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
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`, longest first
  Normalizer normalizer;
  PreTokenizer pretokenizer;
  int64_t num_merges = 0;

  void encode(BpeModel::Session& session, std::string_view text, std::vector<int64_t>& out, bool allow_added) const;
  // Calls segment(text) for the text between added tokens and token(id) for each added token.
  template <typename Segment, typename Token>
  void split_added(std::string_view text, Segment&& segment, Token&& token) const;
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
void Tokenizer::Impl::split_added(std::string_view text, Segment&& segment, Token&& token) const {
  size_t seg_begin = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const auto& candidates = added_by_first_byte[static_cast<unsigned char>(text[i])];
    for (int32_t c : candidates) {
      const AddedToken& t = added[size_t(c)];
      if (text.compare(i, t.content.size(), t.content) != 0) continue;
      size_t begin = i, end = i + t.content.size();
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

Tokenizer Tokenizer::load(const std::string& path) { return from_json_string(read_text_file(path, "tokenizer"), path); }

Tokenizer Tokenizer::from_json_string(const std::string& text, const std::string& origin) {
  auto m = std::make_shared<Impl>();
  const std::string where = "[tokenizer] " + origin + ": ";
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    TIDAL_CHECK(false, where, "not valid JSON: ", e.what());
  }
  try {
    TIDAL_CHECK(doc.is_object() && doc.contains("model"), where, "no \"model\" object; is this a tokenizer.json?");
    const json& model = doc.at("model");
    const std::string type = model.value("type", std::string("BPE"));
    TIDAL_CHECK(type == "BPE", where, "model.type is '", type, "'; only byte-level BPE is supported");
    for (const char* affix : {"continuing_subword_prefix", "end_of_word_suffix"})
      TIDAL_CHECK(!model.contains(affix) || model[affix].is_null() || model[affix].get<std::string>().empty(), where,
                  "model.", affix, " is not supported (byte-level BPE has none)");
    TIDAL_CHECK(!model.contains("dropout") || model["dropout"].is_null() || model["dropout"].get<double>() == 0.0,
                where, "BPE dropout is not supported (it makes encoding random)");

    m->normalizer = Normalizer::from_json(doc.value("normalizer", json()));
    m->pretokenizer = PreTokenizer::from_json(doc.value("pre_tokenizer", json()));
    TIDAL_CHECK(m->pretokenizer.has_byte_level(), where,
                "the pre_tokenizer has no ByteLevel step; only byte-level BPE vocabularies are supported");

    // Vocabulary: spelling -> id.
    int64_t size = 0;
    const json& vocab = model.at("vocab");
    TIDAL_CHECK(vocab.is_object(), where, "model.vocab must be an object of token -> id");
    for (const auto& [token, id_json] : vocab.items()) {
      const int64_t id = id_json.get<int64_t>();
      TIDAL_CHECK(id >= 0 && id < (int64_t(1) << 31), where, "token '", token, "' has id ", id, " out of range");
      size = std::max(size, id + 1);
    }
    for (const json& a : doc.value("added_tokens", json::array())) size = std::max(size, a.at("id").get<int64_t>() + 1);
    m->tokens.assign(size_t(size), std::string());
    m->token_ids.reserve(vocab.size());
    for (const auto& [token, id_json] : vocab.items()) {
      const int64_t id = id_json.get<int64_t>();
      m->tokens[size_t(id)] = token;
      m->token_ids[token] = int32_t(id);
    }

    std::array<int32_t, 256> byte_ids;
    for (int b = 0; b < 256; ++b) {
      auto it = m->token_ids.find(byte_to_symbol(uint8_t(b)));
      byte_ids[size_t(b)] = it == m->token_ids.end() ? -1 : it->second;
    }
    int32_t unk_id = -1;
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      auto it = m->token_ids.find(model["unk_token"].get<std::string>());
      TIDAL_CHECK(it != m->token_ids.end(), where, "model.unk_token '", model["unk_token"].get<std::string>(),
                  "' is not in the vocabulary");
      unk_id = it->second;
    }

    // Merges: "a b" strings (older files) or ["a", "b"] pairs (tokenizers >= 0.20).
    std::vector<BpeModel::Merge> merges;
    const json& merges_json = model.value("merges", json::array());
    merges.reserve(merges_json.size());
    for (size_t r = 0; r < merges_json.size(); ++r) {
      const json& e = merges_json[r];
      std::string a, b;
      if (e.is_string()) {
        const std::string s = e.get<std::string>();
        const size_t sp = s.find(' ');
        TIDAL_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos, where, "merge #", r, " '", s,
                    "' is not two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        TIDAL_CHECK(e.is_array() && e.size() == 2, where, "merge #", r,
                    " is neither \"a b\" nor [\"a\", \"b\"]: ", e.dump());
        a = e[0].get<std::string>();
        b = e[1].get<std::string>();
      }
      auto ia = m->token_ids.find(a), ib = m->token_ids.find(b), iab = m->token_ids.find(a + b);
      TIDAL_CHECK(ia != m->token_ids.end() && ib != m->token_ids.end() && iab != m->token_ids.end(), where, "merge #",
                  r, " ('", a, "', '", b, "'): '",
                  (ia == m->token_ids.end()   ? a
                   : ib == m->token_ids.end() ? b
                                              : a + b),
                  "' is not in the vocabulary");
      merges.push_back({ia->second, ib->second, iab->second});
    }
    m->num_merges = int64_t(merges.size());

    StringMap<int32_t> whole_pieces;
    if (model.value("ignore_merges", false))
      for (const auto& [token, id] : m->token_ids) whole_pieces.emplace(symbols_to_bytes(token), id);
    m->bpe = std::make_unique<BpeModel>(byte_ids, merges, unk_id, std::move(whole_pieces));

    m->bytes.resize(m->tokens.size());
    for (size_t id = 0; id < m->tokens.size(); ++id) m->bytes[id] = symbols_to_bytes(m->tokens[id]);
    m->special.assign(m->tokens.size(), 0);

    for (const json& a : doc.value("added_tokens", json::array())) {
      AddedToken t;
      t.id = a.at("id").get<int64_t>();
      t.content = a.at("content").get<std::string>();
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", false);
      t.special = a.value("special", false);
      TIDAL_CHECK(t.id >= 0 && !t.content.empty(), where, "added token ", a.dump(), " needs an id >= 0 and content");
      m->tokens[size_t(t.id)] = t.content;
      m->bytes[size_t(t.id)] = symbols_to_bytes(t.content);
      m->special[size_t(t.id)] = t.special;
      m->token_ids[t.content] = int32_t(t.id);
      m->added.push_back(std::move(t));
    }
    // Leftmost-longest matching: at each position try the longest candidate first.
    for (size_t i = 0; i < m->added.size(); ++i)
      m->added_by_first_byte[static_cast<unsigned char>(m->added[i].content[0])].push_back(int32_t(i));
    for (auto& list : m->added_by_first_byte)
      std::stable_sort(list.begin(), list.end(), [&](int32_t x, int32_t y) {
        return m->added[size_t(x)].content.size() > m->added[size_t(y)].content.size();
      });
  } catch (const json::exception& e) {
    TIDAL_CHECK(false, where, "malformed tokenizer.json: ", e.what());
  }
  m->source = text;
  return Tokenizer(std::move(m));
}

std::string Tokenizer::to_json_string() const {
  TIDAL_CHECK(impl_ != nullptr, "[tokenizer] save of an empty tokenizer");
  return impl_->source;
}

void Tokenizer::save(const std::string& path) const {
  const std::string text = to_json_string();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    TIDAL_CHECK(out.good(), "[tokenizer] cannot write '", tmp, "'");
    out.write(text.data(), std::streamsize(text.size()));
    out.flush();
    TIDAL_CHECK(out.good(), "[tokenizer] writing '", tmp, "' failed (disk full?)");
  }
  TIDAL_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "[tokenizer] cannot rename '", tmp, "' to '", path, "'");
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
  auto segment = [&](std::string_view seg) { m.pretokenizer.split(m.normalizer.apply(seg, scratch), sink); };
  if (allow_added && !m.added.empty())
    m.split_added(text, segment, [&](int64_t id) { out.push_back(id); });
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
  auto id = token_to_id("<|endoftext|>");
  TIDAL_CHECK(id.has_value(), "[tokenizer] this tokenizer has no <|endoftext|> token for end-of-document");
  return *id;
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
