// libFuzzer target: a Hugging Face tokenizer.json (tidal::data::Tokenizer::load), then a short text
// encoded and decoded with it.
#include "tidal/data/tokenizer.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = tidal::fuzz::write_scratch("tokenizer.json", data, size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::data::Tokenizer t = tidal::data::Tokenizer::load(path);
    const std::vector<int64_t> ids =
        t.encode("Hello, world! <|endoftext|> caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd 123\n\xff");
    (void)t.decode(ids);
    (void)t.decode(ids, /*skip_special=*/true);
    (void)t.vocab_size();
    (void)t.id_to_token(0);
  });
  return 0;
}
