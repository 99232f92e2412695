#pragma once
// Sampling from a causal LM: greedy (temperature 0), temperature, top-k. Each new token runs the
// model over the last max_position_embeddings tokens (no KV cache: simple and exact, fine for the
// small models trained here).
#include <cstdint>
#include <functional>
#include <vector>

#include "tidal/models/causal_lm.h"

namespace tidal::models {

struct SampleOptions {
  int64_t max_new_tokens = 64;
  double temperature = 0.8;  // 0: greedy
  int64_t top_k = 40;        // 0: the whole vocabulary
  uint64_t seed = 0;         // its own random stream: sampling never moves the training RNG
  int64_t stop_token = -1;   // stop after producing it (e.g. the end-of-document token); -1: never
  // Each token sampled goes through it (when set) and the one it returns is taken: several ranks
  // generating together (expert parallelism: every forward is a collective) agree on rank 0's, so they
  // run the same forwards however their logits round.
  std::function<int64_t(int64_t)> agree;
};

// The prompt followed by the generated tokens. The model runs in evaluation mode (no dropout).
std::vector<int64_t> generate(CausalLM& model, const std::vector<int64_t>& prompt, const SampleOptions& opt);

}  // namespace tidal::models
