// Pre-tokenization (GPT-2 and Qwen regexes run by PCRE2), the byte-level alphabet, and NFC.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/unit/data_test_util.h"
#include "tidal/base/error.h"
#include "tidal/data/byte_level.h"
#include "tidal/data/normalizer.h"
#include "tidal/data/pretokenizer.h"

namespace tidal::data {
namespace {

std::vector<std::string> pieces(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  p.split(text, [&](std::string_view s) { out.emplace_back(s); });
  return out;
}

PreTokenizer parse(const std::string& json) { return PreTokenizer::from_json(nlohmann::json::parse(json)); }

using V = std::vector<std::string>;

TEST(DataByteLevel, Gpt2Alphabet) {
  EXPECT_EQ(byte_to_symbol('A'), "A");
  EXPECT_EQ(byte_to_symbol(' '), "\xC4\xA0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_symbol('\n'), "\xC4\x8A");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_symbol(0), "\xC4\x80");     // U+0100
  EXPECT_EQ(byte_to_symbol(0xAD), "\xC5\x83");  // soft hyphen is the 68th remapped byte: U+0143
  for (int b = 0; b < 256; ++b) EXPECT_EQ(symbols_to_bytes(byte_to_symbol(uint8_t(b))), std::string(1, char(b)));
  // GPT-2's ids: '!' is token 0, 'Ġ' (space) token 220.
  EXPECT_EQ(byte_rank_order()[0], '!');
  EXPECT_EQ(byte_rank_order()[220], ' ');
  // A spelling with a character outside the alphabet decodes as its own UTF-8 (Hugging Face's rule).
  EXPECT_EQ(symbols_to_bytes("a b"), "a b");
}

TEST(DataByteLevel, Utf8Validation) {
  EXPECT_EQ(utf8_char_length("\xC3\xA9", 0), 2);
  EXPECT_EQ(utf8_char_length("\xF0\x9F\x98\x80", 0), 4);  // emoji
  EXPECT_EQ(utf8_char_length("\xC0\xAF", 0), 0);          // overlong
  EXPECT_EQ(utf8_char_length("\xED\xA0\x80", 0), 0);      // surrogate
  EXPECT_EQ(utf8_char_length("\xF4\x90\x80\x80", 0), 0);  // past U+10FFFF
  EXPECT_EQ(utf8_char_length("\xE2\x82", 0), 0);          // truncated
  EXPECT_EQ(utf8_char_length("\x80", 0), 0);              // lone continuation
}

// Expected pieces worked out by hand from the patterns (see the comments).
TEST(DataPreTokenizer, Gpt2Pattern) {
  const PreTokenizer p = parse(testing::kGpt2PreTokenizer);
  // "  world": \s+(?!\S) backs off one space so the next word keeps its leading space; "\n\n  x" the same.
  EXPECT_EQ(pieces(p, "Hello  world's 123\n\n  x"), (V{"Hello", " ", " world", "'s", " 123", "\n\n ", " x"}));
  EXPECT_EQ(pieces(p, "I'm $5.00!!"), (V{"I", "'m", " $", "5", ".", "00", "!!"}));
  EXPECT_EQ(pieces(p, "trailing   "), (V{"trailing", "   "}));
  EXPECT_EQ(pieces(p, "\xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80"),
            (V{"\xE4\xBD\xA0\xE5\xA5\xBD", " \xF0\x9F\x98\x80"}));
  EXPECT_EQ(pieces(p, ""), V{});
  // \s is Unicode White_Space, as in Oniguruma (Hugging Face): U+3000 and U+0085 are spaces, U+180E
  // (a format character since Unicode 6.3, still in PCRE2's \s) and U+FEFF are not.
  EXPECT_EQ(pieces(p,
                   "a\xE3\x80\x80"
                   "b"),
            (V{"a", "\xE3\x80\x80", "b"}));
  EXPECT_EQ(pieces(p, "a\xC2\x85'll"), (V{"a", "\xC2\x85", "'ll"}));
  EXPECT_EQ(pieces(p, "a \xE1\xA0\x8E"), (V{"a", " \xE1\xA0\x8E"}));
  EXPECT_EQ(pieces(p, "a \xEF\xBB\xBF"), (V{"a", " \xEF\xBB\xBF"}));
}

TEST(DataPreTokenizer, QwenPattern) {
  const PreTokenizer p = parse(testing::kQwenPreTokenizer);
  // Digits one at a time; " " before a digit is its own piece; newlines gather into "\n\n".
  EXPECT_EQ(pieces(p, "Hello  world's 123\n\n  x"),
            (V{"Hello", " ", " world", "'s", " ", "1", "2", "3", "\n\n", " ", " x"}));
  EXPECT_EQ(pieces(p, "IT'S $hello"), (V{"IT", "'S", " $", "hello"}));  // case-insensitive contractions
  EXPECT_EQ(pieces(p, "x.\n\ny"), (V{"x", ".\n\n", "y"}));
}

TEST(DataPreTokenizer, InvalidUtf8BytesArePiecesOfTheirOwn) {
  const PreTokenizer p = PreTokenizer::gpt2();
  EXPECT_EQ(pieces(p,
                   "ab\xFF\xFE"
                   "cd"),
            (V{"ab", "\xFF", "\xFE", "cd"}));
  EXPECT_EQ(pieces(p, "x \xE2\x82 y"), (V{"x", " ", "\xE2", "\x82", " y"}));  // a truncated "€"
  std::string all;
  for (const std::string& s : pieces(p, "\xC0\xAF\xED\xA0\x80 ok")) all += s;
  EXPECT_EQ(all, "\xC0\xAF\xED\xA0\x80 ok");
}

TEST(DataPreTokenizer, PrefixSpaceAndBehaviors) {
  EXPECT_EQ(pieces(parse(R"({"type": "ByteLevel", "add_prefix_space": true})"), "Hi there"), (V{" Hi", " there"}));
  EXPECT_EQ(pieces(parse(R"({"type": "ByteLevel", "add_prefix_space": true})"), " Hi"), (V{" Hi"}));
  auto split = [](const char* behavior, bool invert) {
    return parse(std::string(R"({"type": "Split", "pattern": {"String": "-"}, "behavior": ")") + behavior +
                 "\", \"invert\": " + (invert ? "true" : "false") + "}");
  };
  const char* text = "a-b--c";
  EXPECT_EQ(pieces(split("Isolated", false), text), (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(pieces(split("Removed", false), text), (V{"a", "b", "c"}));
  EXPECT_EQ(pieces(split("MergedWithPrevious", false), text), (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(pieces(split("MergedWithNext", false), text), (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(pieces(split("Contiguous", false), text), (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(pieces(split("Removed", true), text), (V{"-", "-", "-"}));
}

TEST(DataPreTokenizer, LongWhitespaceRunDoesNotOverflowTheRegexStack) {
  const std::string spaces(1 << 20, ' ');
  const PreTokenizer p = PreTokenizer::gpt2();
  // The run is one match, handed on in bounded chunks (Note [Bounded pieces]), then " x".
  const V got = pieces(p, spaces + "x");
  ASSERT_GE(got.size(), size_t(2));
  EXPECT_EQ(got.back(), " x");
  std::string joined;
  for (size_t i = 0; i + 1 < got.size(); ++i) {
    EXPECT_LE(got[i].size(), PreTokenizer::kMaxPieceBytes);
    joined += got[i];
  }
  EXPECT_EQ(joined, spaces.substr(1));
}

TEST(DataPreTokenizer, BadConfigsAreErrors) {
  EXPECT_THROW(parse(R"({"type": "Metaspace"})"), Error);
  EXPECT_THROW(parse(R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated"})"), Error);
  EXPECT_THROW(parse(R"({"type": "Split", "pattern": {"Regex": "x"}, "behavior": "Sideways"})"), Error);
}

TEST(DataNormalizer, Nfc) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                                 // e + U+0301 -> é
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");              // Hangul jamo L + V -> 가
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // + T -> 각
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");  // reordered: dot below (220) before acute (230)
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                   // ANGSTROM SIGN -> Å (singleton)
  EXPECT_EQ(nfc("\xCD\x84"), "\xCC\x88\xCC\x81");               // U+0344 decomposes, never recomposes
  EXPECT_EQ(nfc("caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD"), "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD");  // already NFC
  EXPECT_EQ(nfc("\xCC\x81x"), "\xCC\x81x");          // leading combining mark stays
  EXPECT_EQ(nfc("e\xFF\xCC\x81"), "e\xFF\xCC\x81");  // an invalid byte blocks composition
  EXPECT_TRUE(is_nfc_quick("plain ASCII and Latin-1: \xC3\xA9"));
  EXPECT_FALSE(is_nfc_quick("e\xCC\x81"));
}

}  // namespace
}  // namespace tidal::data

namespace tidal::data {
namespace {

// Note [Bounded pieces]: a run longer than kMaxPieceBytes (one regex match) comes in chunks of at most that many
// bytes, cut at UTF-8 character boundaries; concatenated they are the run. Shorter pieces are unchanged.
TEST(PreTokenizerBound, LongRunsComeInBoundedChunksAtCharacterBoundaries) {
  const size_t bound = PreTokenizer::kMaxPieceBytes;
  std::vector<std::string> pieces;
  const std::string run(200000, 'a');
  PreTokenizer::gpt2().split(run, [&](std::string_view p) { pieces.emplace_back(p); });
  ASSERT_EQ(pieces.size(), size_t(4));
  EXPECT_EQ(pieces[0].size(), bound);
  EXPECT_EQ(pieces[3].size(), 200000 - 3 * bound);
  std::string accents;
  for (int i = 0; i < 50000; ++i) accents += "\xC3\xA9";  // é, 2 bytes each: 100000 bytes of letters
  pieces.clear();
  PreTokenizer::gpt2().split("x " + accents, [&](std::string_view p) { pieces.emplace_back(p); });
  std::string joined;
  for (const std::string& p : pieces) {
    EXPECT_LE(p.size(), bound);
    EXPECT_NE(static_cast<unsigned char>(p[0]) & 0xC0, 0x80u) << "a chunk starts inside a character";
    joined += p;
  }
  EXPECT_EQ(joined, "x " + accents);
  pieces.clear();
  PreTokenizer::gpt2().split("the quick fox", [&](std::string_view p) { pieces.emplace_back(p); });
  EXPECT_EQ(pieces, (std::vector<std::string>{"the", " quick", " fox"}));
}

}  // namespace
}  // namespace tidal::data
