#include "tidal/data/blended_dataset.h"

#include <cmath>
#include <cstdio>

#include "tidal/base/error.h"

namespace tidal::data {

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights,
                               std::vector<std::string> names)
    : datasets_(std::move(datasets)), weights_(std::move(weights)), names_(std::move(names)) {
  TIDAL_CHECK(!datasets_.empty() && datasets_.size() == weights_.size() && names_.size() == datasets_.size(),
              "[data] a blend needs one weight and one name per dataset");
  TIDAL_CHECK(datasets_.size() < 32768, "[data] a blend of ", datasets_.size(), " datasets is too many");
  double total = 0;
  for (size_t d = 0; d < weights_.size(); ++d) {
    TIDAL_CHECK(weights_[d] > 0 && std::isfinite(weights_[d]), "[data] the weight of ", names_[d],
                " must be a positive number, got ", weights_[d]);
    total += weights_[d];
  }
  for (double& w : weights_) w /= total;
  for (const auto& d : datasets_) {
    TIDAL_CHECK(d->seq_length() == datasets_[0]->seq_length(), "[data] blended datasets differ in sequence length");
    TIDAL_CHECK(d->has_labels() == datasets_[0]->has_labels(),
                "[data] a blend mixes instruction data (with labels) and pretraining data");
    TIDAL_CHECK(d->has_pack_samples() == datasets_[0]->has_pack_samples(),
                "[data] a blend mixes neat packs (--neat-pack) and other data");
  }
  drawn_.assign(datasets_.size(), 0);
}

void BlendedDataset::extend_to(int64_t i) const {
  // Megatron's build_blending_indices: the dataset whose count lags weight x max(n, 1) the most.
  while (int64_t(dataset_of_.size()) <= i) {
    const double n = std::max(double(dataset_of_.size()), 1.0);
    int best = 0;
    double most = weights_[0] * n - double(drawn_[0]);
    for (size_t d = 1; d < weights_.size(); ++d) {
      const double error = weights_[d] * n - double(drawn_[d]);
      if (error > most) {
        most = error;
        best = int(d);
      }
    }
    dataset_of_.push_back(best);
    index_in_.push_back(drawn_[size_t(best)]++);
  }
}

std::pair<int, int64_t> BlendedDataset::source(int64_t i) const {
  TIDAL_ASSERT(i >= 0, "negative sample index");
  std::lock_guard lock(mu_);
  extend_to(i);
  return {dataset_of_[size_t(i)], index_in_[size_t(i)]};
}

void BlendedDataset::sample(int64_t i, int64_t* out) const {
  const auto [d, j] = source(i);
  datasets_[size_t(d)]->sample(j, out);
}

std::pair<int64_t, int64_t> BlendedDataset::locate(int64_t i) const {
  const auto [d, j] = source(i);
  return datasets_[size_t(d)]->locate(j);
}

void BlendedDataset::sample_labels(int64_t i, int64_t* out) const {
  const auto [d, j] = source(i);
  datasets_[size_t(d)]->sample_labels(j, out);
}

void BlendedDataset::sample_pack_samples(int64_t i, int64_t* out) const {
  const auto [d, j] = source(i);
  datasets_[size_t(d)]->sample_pack_samples(j, out);
}

int64_t BlendedDataset::sample_length(int64_t i) const {
  const auto [d, j] = source(i);
  return datasets_[size_t(d)]->sample_length(j);
}

std::vector<int64_t> BlendedDataset::draws(int64_t n) const {
  std::vector<int64_t> out(datasets_.size(), 0);
  if (n <= 0) return out;
  std::lock_guard lock(mu_);
  extend_to(n - 1);
  for (int64_t i = 0; i < n; ++i) ++out[size_t(dataset_of_[size_t(i)])];
  return out;
}

std::string BlendedDataset::describe_draws(int64_t n) const {
  const std::vector<int64_t> d = draws(n);
  std::string out;
  for (size_t k = 0; k < d.size(); ++k) {
    char share[32];
    std::snprintf(share, sizeof share, " (%.1f%%)", n > 0 ? 100.0 * double(d[k]) / double(n) : 0.0);
    out += (out.empty() ? "" : ", ") + names_[k] + " " + std::to_string(d[k]) + share;
  }
  return out;
}

}  // namespace tidal::data
