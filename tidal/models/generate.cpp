#include "tidal/models/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tidal/autograd/grad_mode.h"
#include "tidal/base/philox.h"

namespace tidal::models {

std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, const SampleOptions& opt) {
  TIDAL_CHECK(!prompt.empty(), "[generate] the prompt encodes to no tokens; give some text");
  TIDAL_CHECK(opt.temperature >= 0, "[generate] temperature must be >= 0, got ", opt.temperature);
  TIDAL_CHECK(opt.top_k >= 0, "[generate] top-k must be >= 0, got ", opt.top_k);
  const int64_t vocab = model.config().vocab_size;
  for (int64_t id : prompt)
    TIDAL_CHECK(id >= 0 && id < vocab, "[generate] prompt token ", id, " is outside the vocabulary of ", vocab);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.train(false);
  std::vector<int64_t> ids = prompt;
  uint64_t draw = 0;
  const auto params = model.named_parameters();  // the window goes where the model lives
  const Device device = params.empty() ? Device::cpu() : params.begin()->second.device();
  for (int64_t n = 0; n < opt.max_new_tokens; ++n) {
    const int64_t t = std::min<int64_t>(int64_t(ids.size()), model.config().max_position_embeddings);
    std::vector<int64_t> window(ids.end() - t, ids.end());
    Tensor logits = model.forward(from_vector_i64(window, {1, t}, device)).logits;  // (1, t, V)
    std::vector<float> row = logits.select(1, t - 1).contiguous().to_vector<float>();
    int64_t next = 0;
    if (opt.temperature == 0) {
      next = int64_t(std::max_element(row.begin(), row.end()) - row.begin());
    } else {
      std::vector<int64_t> order(static_cast<size_t>(vocab));
      std::iota(order.begin(), order.end(), 0);
      const int64_t k = opt.top_k > 0 ? std::min(opt.top_k, vocab) : vocab;
      std::partial_sort(order.begin(), order.begin() + k, order.end(),
                        [&](int64_t a, int64_t b) { return row[size_t(a)] > row[size_t(b)]; });
      const double top = row[size_t(order[0])];
      std::vector<double> p(static_cast<size_t>(k));
      double total = 0;
      for (int64_t i = 0; i < k; ++i)
        total += p[size_t(i)] = std::exp((row[size_t(order[size_t(i)])] - top) / opt.temperature);
      double u = double(philox_uniform(opt.seed, draw++)) * total;
      next = order[size_t(k - 1)];
      for (int64_t i = 0; i < k; ++i) {
        u -= p[size_t(i)];
        if (u < 0) {
          next = order[size_t(i)];
          break;
        }
      }
    }
    if (opt.agree) next = opt.agree(next);
    ids.push_back(next);
    if (next == opt.stop_token) break;
  }
  model.train(was_training);
  return ids;
}

}  // namespace tidal::models
