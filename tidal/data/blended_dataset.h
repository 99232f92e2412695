#pragma once
// Megatron-LM's weighted blend of datasets (--data-path 0.3 A 0.7 B; BlendedDataset with the
// build_blending_indices order): stream sample i comes from the dataset whose drawn share lags its weight
// the most after i samples (ties: the first), and is that dataset's next sample of its own stream. The
// order is a pure function of the weights, so a loader's position still resumes it. Each dataset keeps its
// own epochs and shuffle (data/gpt_dataset.h); instruction datasets blend too (their labels follow).
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tidal/data/gpt_dataset.h"

namespace tidal::data {

class BlendedDataset : public TokenDataset {
 public:
  // `weights` > 0 (normalized here), one per dataset; the datasets share seq_length and labels-or-not.
  // `names` label them in describe_draws().
  BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights,
                 std::vector<std::string> names);
  int64_t seq_length() const override { return datasets_[0]->seq_length(); }
  void sample(int64_t i, int64_t* out) const override;
  std::pair<int64_t, int64_t> locate(int64_t i) const override;
  bool has_labels() const override { return datasets_[0]->has_labels(); }
  void sample_labels(int64_t i, int64_t* out) const override;
  bool has_pack_samples() const override { return datasets_[0]->has_pack_samples(); }
  void sample_pack_samples(int64_t i, int64_t* out) const override;
  int64_t sample_length(int64_t i) const override;

  // Stream sample i is sample `second` of dataset `first`'s stream.
  std::pair<int, int64_t> source(int64_t i) const;
  // How many of the first n stream samples each dataset gave.
  std::vector<int64_t> draws(int64_t n) const;
  // "A 123 (30.0%), B 287 (70.0%)": the draws of the first n samples, for the log.
  std::string describe_draws(int64_t n) const;
  const std::vector<double>& weights() const { return weights_; }
  const std::vector<std::string>& names() const { return names_; }

 private:
  // Extends the table of sources to cover stream sample i (under mu_).
  void extend_to(int64_t i) const;

  std::vector<std::shared_ptr<const TokenDataset>> datasets_;
  std::vector<double> weights_;
  std::vector<std::string> names_;
  mutable std::mutex mu_;
  mutable std::vector<int> dataset_of_;    // stream sample -> dataset
  mutable std::vector<int64_t> index_in_;  // stream sample -> that dataset's sample
  mutable std::vector<int64_t> drawn_;     // per dataset: samples in the table so far
};

}  // namespace tidal::data
