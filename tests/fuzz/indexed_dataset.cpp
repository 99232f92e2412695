// libFuzzer target: a Megatron indexed dataset, PREFIX.idx and PREFIX.bin (tidal::data::IndexedDataset),
// then its first sequences and documents read back.
//
// Input layout: a 2-byte little-endian length L, then the .idx bytes, then the last L bytes are the .bin
// (L is cut to what is there). make_seeds.cpp writes the seeds this way.
#include <algorithm>

#include "tests/fuzz/fuzz_support.h"
#include "tidal/data/indexed_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const size_t bin_size = std::min<size_t>(size_t(data[0]) | size_t(data[1]) << 8, size - 2);
  const size_t idx_size = size - 2 - bin_size;
  const std::string prefix = tidal::fuzz::scratch_dir() + "/data";
  tidal::fuzz::write_bytes(prefix + ".idx", data + 2, idx_size);
  tidal::fuzz::write_bytes(prefix + ".bin", data + 2 + idx_size, bin_size);
  tidal::fuzz::expect_clean_errors([&] {
    const tidal::data::IndexedDataset ds(prefix);
    // A few of each: pointers may make every sequence the whole file, and the file is the fuzzer's.
    for (int64_t i = 0; i < std::min<int64_t>(ds.num_sequences(), 16); ++i) (void)ds.sequence(i);
    for (int64_t d = 0; d < std::min<int64_t>(ds.num_documents(), 16); ++d) (void)ds.document(d);
    (void)ds.document_token_offset(ds.num_documents());
    std::vector<int64_t> out(size_t(std::min<int64_t>(ds.num_tokens(), 64)));
    ds.read_tokens(0, int64_t(out.size()), out.data());
  });
  return 0;
}
