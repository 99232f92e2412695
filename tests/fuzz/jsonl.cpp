// libFuzzer target: JSON Lines input of `tidal prepare` (tidal::data::for_each_json_record), plain or gzip.
//
// Input layout: one flag byte (bit 0: the file is named .jsonl.gz and read through zlib; bit 1: --on-bad-line
// skip instead of fail), then the file's bytes. Records are read with the keys "text" and "title".
// make_seeds.cpp writes the seeds this way.
#include "tidal/data/jsonl.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const bool gz = data[0] & 1, skip = data[0] & 2;
  const std::string path = tidal::fuzz::scratch_dir() + (gz ? "/in.jsonl.gz" : "/in.jsonl");
  tidal::fuzz::write_bytes(path, data + 1, size - 1);
  tidal::fuzz::expect_clean_errors([&] {
    tidal::data::JsonlCounts counts;
    size_t bytes = 0;
    tidal::data::for_each_json_record(path, {"text", "title"},
                                      skip ? tidal::data::BadLine::skip : tidal::data::BadLine::fail, counts,
                                      [&](std::vector<std::string>&& values) {
                                        for (const std::string& v : values) bytes += v.size();
                                      });
    if (counts.records < 0 || counts.bad < 0 || counts.blank < 0 || bytes > size * 8 + 64) std::abort();
  });
  return 0;
}
