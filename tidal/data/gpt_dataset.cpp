#include "tidal/data/gpt_dataset.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "tidal/base/error.h"
#include "tidal/base/philox.h"

namespace tidal::data {

std::array<DocumentRange, 3> split_documents(const std::string& split, int64_t num_documents) {
  // megatron/core/datasets/utils.py: parse_and_normalize_split + _get_split_indices.
  std::vector<double> w;
  auto number_char = [](char c) { return c == '.' || (c >= '0' && c <= '9'); };
  for (size_t i = 0; i < split.size();) {  // the runs of [.0-9]+, as Megatron's re.findall
    if (!number_char(split[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < split.size() && number_char(split[j])) ++j;
    const std::string s = split.substr(i, j - i);
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    TIDAL_CHECK(end == s.c_str() + s.size() && std::isfinite(v), "[data] --split '", split, "': '", s,
                "' is not a number");
    w.push_back(v);
    i = j;
  }
  TIDAL_CHECK(!w.empty() && w.size() <= 3, "[data] --split '", split,
              "' must be 1 to 3 comma-separated weights (train,valid,test), e.g. 98,2,0");
  w.resize(3, 0.0);
  const double total = w[0] + w[1] + w[2];
  TIDAL_CHECK(total > 0, "[data] --split '", split, "' has no positive weight");
  std::array<int64_t, 4> idx{0, 0, 0, 0};
  for (int k = 0; k < 3; ++k)  // Python's round(): half to even, which nearbyint does by default
    idx[size_t(k + 1)] = idx[size_t(k)] + int64_t(std::nearbyint(w[size_t(k)] / total * double(num_documents)));
  const int64_t excess = idx[3] - num_documents;
  for (int k = 1; k < 4; ++k) idx[size_t(k)] -= excess;
  std::array<DocumentRange, 3> ranges;
  for (int k = 0; k < 3; ++k)
    ranges[size_t(k)] = {std::max<int64_t>(idx[size_t(k)], 0), std::max<int64_t>(idx[size_t(k + 1)], 0)};
  return ranges;
}

Sample TokenDataset::get(int64_t i) const {
  Sample s;
  s.tokens.resize(size_t(seq_length() + 1));
  sample(i, s.tokens.data());
  std::tie(s.epoch, s.index) = locate(i);
  return s;
}

int64_t shuffle_index(int64_t i, int64_t n, uint64_t seed, uint64_t epoch) {
  TIDAL_ASSERT(i >= 0 && i < n, "shuffle_index ", i, " of ", n);
  if (n <= 1) return i;
  int bits = 1;
  while ((int64_t(1) << bits) < n) ++bits;
  const int half = (bits + 1) / 2;
  const uint64_t mask = (uint64_t(1) << half) - 1;
  const uint64_t key = seed ^ (epoch * 0x9E3779B97F4A7C15ull);
  uint64_t x = uint64_t(i);
  do {  // cycle walking: the network permutes [0, 4^half), re-apply until back inside [0, n)
    uint64_t left = x >> half, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = philox4x32((round << 40) | right, key)[0] & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half) | right;
  } while (x >= uint64_t(n));
  return int64_t(x);
}

GPTDataset::GPTDataset(std::shared_ptr<const IndexedDataset> data, DocumentRange documents, int64_t seq_length,
                       uint64_t seed, std::string name)
    : data_(std::move(data)), documents_(documents), seq_length_(seq_length), seed_(seed) {
  TIDAL_CHECK(data_ != nullptr, "[data] GPTDataset needs an indexed dataset");
  TIDAL_CHECK(seq_length > 0, "[data] seq_length must be positive, got ", seq_length);
  const int64_t docs = data_->num_documents();
  TIDAL_CHECK(documents.begin >= 0 && documents.begin <= documents.end && documents.end <= docs, "[data] the ", name,
              " document range [", documents.begin, ", ", documents.end, ") is not within the ", docs,
              " documents of '", data_->prefix(), "'");
  TIDAL_CHECK(documents.size() > 0, "[data] the ", name, " split of '", data_->prefix(), "' is empty: it gets 0 of ",
              docs, " documents (use more documents or a different --split)");
  first_token_ = data_->document_token_offset(documents.begin);
  end_token_ = data_->document_token_offset(documents.end);
  samples_ = (end_token_ - first_token_ - 1) / seq_length;
  TIDAL_CHECK(samples_ > 0, "[data] the ", name, " split of '", data_->prefix(), "' has ", end_token_ - first_token_,
              " tokens in ", documents.size(), " documents: fewer than one sample of seq_length + 1 = ", seq_length + 1,
              " tokens");
}

std::shared_ptr<GPTDataset> GPTDataset::from_split(std::shared_ptr<const IndexedDataset> data, const std::string& split,
                                                   int which, int64_t seq_length, uint64_t seed) {
  static const char* names[3] = {"train", "validation", "test"};
  TIDAL_CHECK(which >= 0 && which < 3, "[data] split index ", which, " is not 0 (train), 1 (validation) or 2 (test)");
  TIDAL_CHECK(data != nullptr, "[data] GPTDataset needs an indexed dataset");
  const auto ranges = split_documents(split, data->num_documents());
  return std::make_shared<GPTDataset>(std::move(data), ranges[size_t(which)], seq_length, seed,
                                      std::string(names[which]) + " (--split " + split + ")");
}

std::pair<int64_t, int64_t> GPTDataset::locate(int64_t i) const {
  TIDAL_CHECK(i >= 0, "[data] sample index ", i, " is negative");
  const int64_t epoch = i / samples_;
  return {epoch, shuffle_index(i % samples_, samples_, seed_, uint64_t(epoch))};
}

void GPTDataset::sample(int64_t i, int64_t* out) const {
  const int64_t k = locate(i).second;
  data_->read_tokens(first_token_ + k * seq_length_, seq_length_ + 1, out);
}

MockDataset::MockDataset(int64_t vocab_size, int64_t seq_length, uint64_t seed)
    : vocab_size_(vocab_size), seq_length_(seq_length), seed_(seed) {
  TIDAL_CHECK(vocab_size > 0 && vocab_size <= (int64_t(1) << 32),
              "[data] mock data vocab_size must be in [1, 2^32], got ", vocab_size);
  TIDAL_CHECK(seq_length > 0, "[data] seq_length must be positive, got ", seq_length);
}

void MockDataset::sample(int64_t i, int64_t* out) const {
  TIDAL_CHECK(i >= 0, "[data] sample index ", i, " is negative");
  const int64_t n = seq_length_ + 1, blocks = (n + 3) / 4;
  for (int64_t b = 0; b < blocks; ++b) {
    const auto r = philox4x32(uint64_t(i) * uint64_t(blocks) + uint64_t(b), seed_);
    for (int64_t lane = 0; lane < 4 && b * 4 + lane < n; ++lane)  // multiply-shift: uniform without division
      out[b * 4 + lane] = int64_t((uint64_t(r[size_t(lane)]) * uint64_t(vocab_size_)) >> 32);
  }
}

void TokenDataset::sample_labels(int64_t /*i*/, int64_t* /*out*/) const {
  TIDAL_ASSERT(false, "sample_labels of a dataset without labels");
}

void TokenDataset::sample_pack_samples(int64_t /*i*/, int64_t* /*out*/) const {
  TIDAL_ASSERT(false, "sample_pack_samples of a dataset without neat packs");
}

DataLoader::DataLoader(std::shared_ptr<const TokenDataset> dataset, int64_t position, int64_t variable_multiple)
    : dataset_(std::move(dataset)), variable_multiple_(variable_multiple) {
  TIDAL_CHECK(dataset_ != nullptr, "[data] DataLoader needs a dataset");
  TIDAL_CHECK(variable_multiple >= 0, "[data] variable_multiple must be >= 0, got ", variable_multiple);
  set_position(position);
}

void DataLoader::set_position(int64_t position) {
  TIDAL_CHECK(position >= 0, "[data] loader position must be >= 0, got ", position);
  position_ = position;
}

Batch DataLoader::next(int64_t batch_size) {
  TIDAL_CHECK(batch_size > 0, "[data] batch size must be positive, got ", batch_size);
  TIDAL_CHECK(position_ <= std::numeric_limits<int64_t>::max() - batch_size, "[data] loader position ", position_,
              " cannot advance by ", batch_size, " (a corrupted checkpoint's data position?)");
  const int64_t full = dataset_->seq_length() + 1;
  int64_t width = full;
  if (variable_multiple_ > 0) {  // the longest sample's T, rounded up, at most seq_length
    int64_t longest = 1;
    for (int64_t r = 0; r < batch_size; ++r) longest = std::max(longest, dataset_->sample_length(position_ + r));
    const int64_t t = (longest - 1 + variable_multiple_ - 1) / variable_multiple_ * variable_multiple_;
    width = std::min(full, std::max<int64_t>(t, 1) + 1);
  }
  Batch b{empty({batch_size, width}, DType::i64), Tensor(), Tensor(), position_};
  const bool labels = dataset_->has_labels(), samples = dataset_->has_pack_samples();
  if (labels) b.labels = empty({batch_size, width}, DType::i64);
  if (samples) b.pack_samples = empty({batch_size, width}, DType::i64);
  std::vector<int64_t> row(size_t(width == full ? 0 : full));  // a whole sample, when the batch keeps less
  // Row r of `to` from `read` (the dataset writes whole samples: through `row` when the batch keeps less).
  const auto fill = [&](Tensor& to, int64_t r, const auto& read) {
    int64_t* dst = to.data<int64_t>() + r * width;
    read(position_ + r, width == full ? dst : row.data());
    if (width != full) std::copy_n(row.data(), width, dst);
  };
  for (int64_t r = 0; r < batch_size; ++r) {
    fill(b.tokens, r, [&](int64_t i, int64_t* out) { dataset_->sample(i, out); });
    if (labels) fill(b.labels, r, [&](int64_t i, int64_t* out) { dataset_->sample_labels(i, out); });
    if (samples) fill(b.pack_samples, r, [&](int64_t i, int64_t* out) { dataset_->sample_pack_samples(i, out); });
  }
  position_ += batch_size;
  return b;
}

}  // namespace tidal::data
