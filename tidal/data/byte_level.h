#pragma once
// GPT-2's byte-level alphabet and the UTF-8 helpers the tokenizer needs. Byte-level BPE maps every
// byte to a printable character (bytes 33..126, 161..172 and 174..255 to themselves, the other 68 to
// U+0100 and up), so any byte string has a token spelling and nothing is ever unknown.
#include <cstdint>
#include <string>
#include <string_view>

namespace tidal::data {

// UTF-8 of the character byte `b` is spelled with in a byte-level vocabulary.
const std::string& byte_to_symbol(uint8_t b);

// The byte a code point stands for, or -1 when it is not one of the 256 byte characters.
int symbol_to_byte(char32_t cp);

// Appends the byte-level spelling of `bytes` (each byte becomes its character's UTF-8).
void append_symbols(std::string_view bytes, std::string& out);

// The bytes a token spelling stands for. Where some character is not a byte character (an added
// token such as "<|im start|>" with a space), the token's own UTF-8 is used, as Hugging Face's
// ByteLevel decoder does.
std::string symbols_to_bytes(std::string_view token);

// The order GPT-2 gives the 256 byte tokens: by the code point of their character (printable bytes
// first). byte_rank_order()[i] is the byte of token i.
const uint8_t* byte_rank_order();

// Length of the valid UTF-8 character starting at s[i] (1..4), or 0 when the bytes there are not
// valid UTF-8 (overlong forms, surrogates and code points past U+10FFFF are invalid, as in PCRE2).
int utf8_char_length(std::string_view s, size_t i);

// Decodes the valid character at s[i] whose length utf8_char_length gave.
char32_t utf8_decode(std::string_view s, size_t i, int length);

// Appends the UTF-8 of code point cp.
void utf8_append(char32_t cp, std::string& out);

// Walks `s` in order: run(substring) for each maximal non-empty run of valid UTF-8, invalid(byte)
// for each byte that is not part of a valid character.
template <typename Run, typename Invalid>
void split_valid_utf8(std::string_view s, Run&& run, Invalid&& invalid) {
  size_t run_begin = 0, i = 0;
  while (i < s.size()) {
    const int len = utf8_char_length(s, i);
    if (len > 0) {
      i += size_t(len);
      continue;
    }
    if (i > run_begin) run(s.substr(run_begin, i - run_begin));
    invalid(s.substr(i, 1));
    run_begin = ++i;
  }
  if (i > run_begin) run(s.substr(run_begin, i - run_begin));
}

}  // namespace tidal::data
