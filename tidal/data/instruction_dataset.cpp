#include "tidal/data/instruction_dataset.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/data/instruction_sample.h"

namespace tidal::data {
namespace {

std::shared_ptr<const IndexedDataset> open_part(const std::string& prefix, const char* key) {
  const std::string path = prefix + "_packed_" + key + "_document";
  TIDAL_CHECK(std::filesystem::exists(path + ".idx") && std::filesystem::exists(path + ".bin"),
              "[data] --is-instruction-dataset: ", path, ".idx/.bin do not exist: --data-path is the --output-prefix ",
              "given to `tidal prepare --handler-name ...` (or MindSpeed's preprocess_data.py), which writes ", prefix,
              "_packed_input_ids_document and ", prefix, "_packed_labels_document");
  return std::make_shared<const IndexedDataset>(path);
}

bool is_integer(TokenDType t) { return t != TokenDType::f32 && t != TokenDType::f64; }

}  // namespace

InstructionFiles open_instruction_files(const std::string& prefix, bool neat_pack) {
  InstructionFiles f{open_part(prefix, "input_ids"), open_part(prefix, "labels"), nullptr};
  const IndexedDataset &ids = *f.input_ids, &labels = *f.labels;
  TIDAL_CHECK(is_integer(ids.dtype()), "[data] ", ids.prefix(), " holds ", token_dtype_name(ids.dtype()),
              ", not token ids: prepare the data again");
  const TokenDType l = labels.dtype();
  TIDAL_CHECK(l == TokenDType::i16 || l == TokenDType::i32 || l == TokenDType::i64, "[data] ", labels.prefix(),
              " holds ", token_dtype_name(l), ": labels need a signed integer type (-100 marks an untrained token; ",
              "tidal prepare and MindSpeed write int32)");
  TIDAL_CHECK(ids.num_documents() == labels.num_documents() && ids.num_sequences() == labels.num_sequences(), "[data] ",
              ids.prefix(), " has ", ids.num_documents(), " records but ", labels.prefix(), " has ",
              labels.num_documents(), ": the two files come from different runs; prepare the data again");
  TIDAL_CHECK(ids.sizes() == labels.sizes() && ids.document_indices() == labels.document_indices(), "[data] ",
              ids.prefix(), " and ", labels.prefix(), " differ in record lengths: the two files come from different ",
              "runs; prepare the data again");
  TIDAL_CHECK(ids.num_documents() > 0, "[data] ", ids.prefix(), " holds no record");
  if (neat_pack) {
    f.attention_mask = open_part(prefix, "attention_mask");
    const IndexedDataset& mask = *f.attention_mask;
    TIDAL_CHECK(is_integer(mask.dtype()), "[data] --neat-pack: ", mask.prefix(), " holds ",
                token_dtype_name(mask.dtype()), ", not sample indices: prepare the data again");
    TIDAL_CHECK(mask.sizes() == ids.sizes() && mask.document_indices() == ids.document_indices(), "[data] ",
                mask.prefix(), " and ", ids.prefix(), " differ in records or lengths: the two files come from ",
                "different runs; prepare the data again");
  }
  return f;
}

InstructionDataset::InstructionDataset(InstructionFiles files, DocumentRange records, int64_t seq_length, uint64_t seed,
                                       int64_t pad_id, std::string name)
    : files_(std::move(files)), records_(records), seq_length_(seq_length), pad_id_(pad_id), seed_(seed) {
  TIDAL_CHECK(files_.input_ids && files_.labels, "[data] InstructionDataset needs both files");
  TIDAL_CHECK(seq_length > 0, "[data] seq_length must be positive, got ", seq_length);
  TIDAL_CHECK(records.size() > 0, "[data] the ", name, " split of ", files_.input_ids->prefix(), " has no record (",
              files_.input_ids->num_documents(), " records in all): change --split");
}

std::shared_ptr<InstructionDataset> InstructionDataset::from_split(const InstructionFiles& files,
                                                                   const std::string& split, int which,
                                                                   int64_t seq_length, uint64_t seed, int64_t pad_id) {
  static const char* names[3] = {"train", "validation", "test"};
  TIDAL_CHECK(which >= 0 && which < 3, "[data] split index must be 0, 1 or 2, got ", which);
  const auto ranges = split_documents(split, files.input_ids->num_documents());
  return std::make_shared<InstructionDataset>(files, ranges[size_t(which)], seq_length, seed, pad_id,
                                              std::string(names[which]) + " (--split " + split + ")");
}

std::pair<int64_t, int64_t> InstructionDataset::locate(int64_t i) const {
  TIDAL_CHECK(i >= 0, "[data] sample index ", i, " is negative");
  const int64_t n = records_.size(), epoch = i / n;
  return {epoch, shuffle_index(i % n, n, seed_, uint64_t(epoch))};
}

int64_t InstructionDataset::sample_length(int64_t i) const {
  const int64_t d = records_.begin + locate(i).second;
  const IndexedDataset& ids = *files_.input_ids;
  return std::min(ids.document_token_offset(d + 1) - ids.document_token_offset(d), seq_length_ + 1);
}

void InstructionDataset::read(const IndexedDataset& data, int64_t i, int64_t pad, int64_t* out) const {
  const int64_t d = records_.begin + locate(i).second;
  const int64_t first = data.document_token_offset(d);
  const int64_t n = std::min(data.document_token_offset(d + 1) - first, seq_length_ + 1);
  data.read_tokens(first, n, out);
  std::fill(out + n, out + seq_length_ + 1, pad);
}

void InstructionDataset::sample(int64_t i, int64_t* out) const { read(*files_.input_ids, i, pad_id_, out); }

void InstructionDataset::sample_labels(int64_t i, int64_t* out) const { read(*files_.labels, i, kIgnoreIndex, out); }

void InstructionDataset::sample_pack_samples(int64_t i, int64_t* out) const {
  TIDAL_ASSERT(files_.attention_mask != nullptr, "sample_pack_samples without the attention-mask file");
  read(*files_.attention_mask, i, 0, out);
}

}  // namespace tidal::data
