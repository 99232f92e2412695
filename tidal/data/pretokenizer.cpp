#include "tidal/data/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <nlohmann/json.hpp>

#include "tidal/base/error.h"
#include "tidal/base/json.h"
#include "tidal/data/byte_level.h"

namespace tidal::data {
namespace {

using json = nlohmann::json;

enum PieceFlags : int { kValid = 1, kAtomic = 2 };  // known valid UTF-8; an invalid byte (never split)

// Per-thread match data and JIT stack: pcre2 match state is not shareable between threads.
struct MatchState {
  pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
  pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
  pcre2_match_context* context = pcre2_match_context_create(nullptr);
  MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

// Turns the match / gap spans of one piece into pieces as a Split behavior says (the state machine
// of Hugging Face's SplitDelimiterBehavior, run as a stream so a long text is never materialized).
class SpanMerger {
 public:
  using Emit = std::function<void(size_t, size_t)>;
  SpanMerger(PreTokenizer::Behavior b, bool invert, Emit emit)
      : behavior_(b), invert_(invert), emit_(std::move(emit)) {}

  void push(size_t begin, size_t end, bool is_match) {
    if (begin == end) return;
    if (invert_) is_match = !is_match;
    using B = PreTokenizer::Behavior;
    switch (behavior_) {
      case B::isolated: emit_(begin, end); break;
      case B::removed:
        if (!is_match) emit_(begin, end);
        break;
      case B::merged_with_previous:  // a match joins the piece before it unless that was a match
        if (is_match && !previous_match_ && has_pending_) {
          pending_end_ = end;
        } else {
          flush();
          set_pending(begin, end);
        }
        break;
      case B::contiguous:  // consecutive spans of one kind become one piece
        if (has_pending_ && is_match == previous_match_) {
          pending_end_ = end;
        } else {
          flush();
          set_pending(begin, end);
        }
        break;
      case B::merged_with_next:  // a match joins the piece after it unless that is a match
        if (has_pending_ && previous_match_ && !is_match) {
          pending_end_ = end;
          flush();
        } else {
          flush();
          set_pending(begin, end);
          if (!is_match) flush();
        }
        break;
    }
    previous_match_ = is_match;
  }
  void finish() { flush(); }

 private:
  void set_pending(size_t b, size_t e) {
    has_pending_ = true;
    pending_begin_ = b;
    pending_end_ = e;
  }
  void flush() {
    if (has_pending_) emit_(pending_begin_, pending_end_);
    has_pending_ = false;
  }
  PreTokenizer::Behavior behavior_;
  bool invert_;
  Emit emit_;
  bool previous_match_ = false, has_pending_ = false;
  size_t pending_begin_ = 0, pending_end_ = 0;
};

PreTokenizer::Behavior parse_behavior(const std::string& s, const std::string& where) {
  using B = PreTokenizer::Behavior;
  if (s == "Isolated") return B::isolated;
  if (s == "Removed") return B::removed;
  if (s == "MergedWithPrevious") return B::merged_with_previous;
  if (s == "MergedWithNext") return B::merged_with_next;
  if (s == "Contiguous") return B::contiguous;
  TIDAL_CHECK(false, where, " is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous");
  return B::isolated;
}

const char* behavior_name(PreTokenizer::Behavior b) {
  using B = PreTokenizer::Behavior;
  switch (b) {
    case B::isolated: return "Isolated";
    case B::removed: return "Removed";
    case B::merged_with_previous: return "MergedWithPrevious";
    case B::merged_with_next: return "MergedWithNext";
    case B::contiguous: return "Contiguous";
  }
  return "Isolated";
}

// The step(s) of the pre-tokenizer `j`, field `path` of `source`, appended to `steps`.
void parse_step(const json& j, std::string_view source, const std::string& path, int depth,
                std::vector<PreTokenizer::Step>& steps) {
  auto field = [&](std::string_view sub) { return detail::str_cat(source, " field '", path, sub, "'"); };
  const std::string where = field("");
  TIDAL_CHECK(depth <= PreTokenizer::kMaxSequenceDepth, where, " nests Sequences more than ",
              PreTokenizer::kMaxSequenceDepth, " deep");
  TIDAL_CHECK(j.is_object(), where, " must be an object, found ", json_kind(j));
  const json* type_json = json_find(j, "type", where);
  TIDAL_CHECK(type_json != nullptr, where, " has no type");
  const std::string type = json_string(*type_json, field(".type"));
  auto get_bool = [&](const char* key, bool fallback) {
    const json* v = json_find(j, key, where);
    return v == nullptr ? fallback : json_bool(*v, field(std::string(".") + key));
  };
  PreTokenizer::Step s;
  if (type == "Sequence") {
    const json* list = json_find(j, "pretokenizers", where);
    TIDAL_CHECK(list != nullptr && list->is_array(), field(".pretokenizers"), " must be an array, found ",
                list ? json_kind(*list) : "nothing");
    for (size_t i = 0; i < list->size(); ++i)
      parse_step((*list)[i], source, detail::str_cat(path, ".pretokenizers[", i, "]"), depth + 1, steps);
    return;
  }
  TIDAL_CHECK(steps.size() < size_t(PreTokenizer::kMaxSteps), where, ": more than ", PreTokenizer::kMaxSteps,
              " pre-tokenizer steps");
  if (type == "ByteLevel") {
    s.kind = PreTokenizer::Step::Kind::byte_level;
    s.add_prefix_space = get_bool("add_prefix_space", true);
    if (get_bool("use_regex", true)) s.regex = std::make_shared<Regex>(kGpt2Pattern);
  } else if (type == "Split") {
    const json* p = json_find(j, "pattern", where);
    TIDAL_CHECK(p != nullptr && p->is_object(), field(".pattern"), " must be {\"Regex\": ...} or {\"String\": ...}");
    if (const json* regex = json_find(*p, "Regex", field(".pattern")))
      s.regex = std::make_shared<Regex>(json_string(*regex, field(".pattern.Regex")), false, field(".pattern.Regex"));
    else if (const json* literal = json_find(*p, "String", field(".pattern")))
      s.regex =
          std::make_shared<Regex>(json_string(*literal, field(".pattern.String")), true, field(".pattern.String"));
    else
      TIDAL_CHECK(false, field(".pattern"), " must be {\"Regex\": ...} or {\"String\": ...}");
    const json* behavior = json_find(j, "behavior", where);
    s.behavior = behavior == nullptr ? PreTokenizer::Behavior::isolated
                                     : parse_behavior(json_string(*behavior, field(".behavior")), field(".behavior"));
    s.invert = get_bool("invert", false);
  } else {
    TIDAL_CHECK(false, field(".type"), " names a pre-tokenizer tidal does not support (supported: ByteLevel, Split, ",
                "Sequence of those)");
  }
  steps.push_back(std::move(s));
}

// PCRE2's \s (UCP) also matches U+180E, which stopped being White_Space in Unicode 6.3; Oniguruma
// (Hugging Face) and Python's regex module follow White_Space. Spelling the set out makes them agree:
// \s becomes the list (in a class) or a class of it, \S the negated class. \S inside a class is left.
std::string spell_out_whitespace(const std::string& p) {
  static const std::string list =
      R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[i + 1];
      if (e == 's') {
        out += in_class ? list : "[" + list + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + list + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is a literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:] inside a class
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out += p.substr(i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal, std::string_view where) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = literal ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
  const std::string compiled = literal ? pattern : spell_out_whitespace(pattern);
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(compiled.data()), compiled.size(), options, &error, &offset, nullptr);
  TIDAL_CHECK(code != nullptr, where, " does not compile: ", pcre2_message(error), " at byte ", offset, " of ",
              pattern.size());
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT support, pcre2_match interprets
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

void Regex::for_each_match(std::string_view text, const std::function<void(size_t, size_t)>& f) const {
  MatchState& st = match_state();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  const size_t n = text.size();
  size_t start = 0;
  while (start < n) {
    const int rc =
        pcre2_match(static_cast<const pcre2_code*>(code_), subject, n, start, PCRE2_NO_UTF_CHECK, st.data, st.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    TIDAL_CHECK(rc >= 0, "[tokenizer] a pre-tokenizer regex of ", pattern_.size(), " bytes failed on a text of ", n,
                " bytes: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
    const size_t b = ov[0], e = ov[1];
    if (e == b) {  // empty match: step over one character
      const int len = utf8_char_length(text, b < n ? b : n - 1);
      start = b + size_t(len > 0 ? len : 1);
      continue;
    }
    f(b, e);
    start = e;
  }
}

PreTokenizer PreTokenizer::gpt2() {
  PreTokenizer p;
  Step s;
  s.kind = Step::Kind::byte_level;
  s.regex = std::make_shared<Regex>(kGpt2Pattern);
  p.steps_.push_back(std::move(s));
  return p;
}

PreTokenizer PreTokenizer::from_json(const json& j, std::string_view source) {
  PreTokenizer p;
  if (!j.is_null()) parse_step(j, source, "pre_tokenizer", 0, p.steps_);
  return p;
}

json PreTokenizer::to_json() const {
  json list = json::array();
  for (const Step& s : steps_) {
    if (s.kind == Step::Kind::byte_level) {
      list.push_back({{"type", "ByteLevel"},
                      {"add_prefix_space", s.add_prefix_space},
                      {"trim_offsets", true},
                      {"use_regex", s.regex != nullptr}});
    } else {
      list.push_back({{"type", "Split"},
                      {"pattern", {{"Regex", s.regex->pattern()}}},
                      {"behavior", behavior_name(s.behavior)},
                      {"invert", s.invert}});
    }
  }
  if (list.empty()) return nullptr;
  if (list.size() == 1) return list[0];
  return {{"type", "Sequence"}, {"pretokenizers", list}};
}

bool PreTokenizer::has_byte_level() const {
  for (const Step& s : steps_)
    if (s.kind == Step::Kind::byte_level) return true;
  return false;
}

void PreTokenizer::split(std::string_view text, const Sink& sink) const {
  // Note [Bounded pieces]: a piece longer than kMaxPieceBytes (a run of letters or digits with no space, which
  // real text never has: a 200 MB "word" of DNA letters) is handed on in chunks of at most that many bytes,
  // each cut before a UTF-8 lead byte, so BPE's work and memory per piece stay bounded. Hugging Face's
  // tokenizers would merge across the cuts; below the bound the pieces are theirs exactly.
  const Sink bounded = [&sink](std::string_view piece) {
    while (piece.size() > kMaxPieceBytes) {
      size_t cut = kMaxPieceBytes;
      while (cut > kMaxPieceBytes - 4 && (static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) --cut;
      sink(piece.substr(0, cut));
      piece.remove_prefix(cut);
    }
    sink(piece);
  };
  run(0, text, 0, bounded);
}

void PreTokenizer::run(size_t k, std::string_view piece, int flags, const Sink& sink) const {
  if (piece.empty()) return;
  if (k == steps_.size() || (flags & kAtomic)) {
    sink(piece);
    return;
  }
  const Step& step = steps_[k];
  std::string prefixed;
  if (step.add_prefix_space && piece[0] != ' ') {
    prefixed.reserve(piece.size() + 1);
    prefixed += ' ';
    prefixed += piece;
    piece = prefixed;
  }
  if (!step.regex) {
    run(k + 1, piece, flags, sink);
    return;
  }
  // One valid UTF-8 run: regex matches and the gaps between them, merged as the behavior says.
  auto split_run = [&](std::string_view text) {
    SpanMerger merger(step.behavior, step.invert,
                      [&](size_t b, size_t e) { run(k + 1, text.substr(b, e - b), kValid, sink); });
    size_t prev = 0;
    step.regex->for_each_match(text, [&](size_t b, size_t e) {
      merger.push(prev, b, false);
      merger.push(b, e, true);
      prev = e;
    });
    merger.push(prev, text.size(), false);
    merger.finish();
  };
  if (flags & kValid) {
    split_run(piece);
    return;
  }
  split_valid_utf8(piece, split_run, [&](std::string_view byte) { run(k + 1, byte, kAtomic, sink); });
}

}  // namespace tidal::data
