#include "tests/support/sharded_adamw_run.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>

#include "tidal/optim/adamw.h"
#include "tidal/optim/distributed_adamw.h"
#include "tidal/optim/grad_clip.h"
#include "tidal/tensor.h"

namespace tidal::testing {
namespace {

// Sizes that put the shards' cuts inside parameters (at 16384 elements from their start) on 2 and 3
// ranks, a 1-D parameter without weight decay and one smaller than a chunk.
const std::vector<std::pair<std::string, Shape>> kParams = {
    {"embed.weight", {300, 100}}, {"norm.weight", {700}}, {"proj.weight", {130, 201}}, {"proj.bias", {5}}};
constexpr double kLr = 1e-2, kMaxNorm = 1.0;  // the norms are about 40: every step clips

optim::NamedParameters make_params(const ShardedRunOptions& o) {
  optim::NamedParameters out;
  for (size_t k = 0; k < kParams.size(); ++k) {
    const auto& [name, shape] = kParams[k];
    std::vector<double> v(static_cast<size_t>(shape.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.5 * std::sin(0.37 * double(i) + double(k));
    Tensor p = from_vector(v, shape, o.dtype, o.device);
    p.set_requires_grad(true);
    out.emplace_back(name, p);
  }
  return out;
}

// Rank r's gradient of parameter k at step s: f32 for bf16 parameters (--bf16's main gradients).
Tensor gradient(size_t k, int s, int r, const ShardedRunOptions& o) {
  const Shape& shape = kParams[k].second;
  std::vector<double> v(static_cast<size_t>(shape.numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = (0.2 + 0.1 * r) * std::cos(0.11 * double(i) + 1.3 * s + 0.7 * r + double(k)) + 0.01 * double(r + 1);
  return from_vector(v, shape, o.dtype == DType::bf16 ? DType::f32 : o.dtype, o.device);
}

optim::AdamWOptions adamw_options() {
  optim::AdamWOptions a;
  a.lr = kLr;
  a.weight_decay = 0.1;
  return a;
}

std::vector<std::vector<double>> values(const optim::NamedParameters& params) {
  std::vector<std::vector<double>> out;
  for (const auto& [name, p] : params) out.push_back(p.detach().to_vector<double>());
  return out;
}

}  // namespace

AdamWRun sharded_adamw_run(dist::Communicator& comm, const ShardedRunOptions& o) {
  const optim::NamedParameters params = make_params(o);
  optim::DistributedAdamW sharded(params, comm, o.shard_parameters);
  sharded.copy_shard_from_parameters();
  optim::AdamW local(sharded.shard_parameters(), adamw_options(), sharded.decay_rule());
  const std::vector<size_t> first = {3, 2}, second = {1, 0};  // buckets, last parameters first
  AdamWRun run;
  for (int s = 0; s < o.steps; ++s) {
    for (size_t k = 0; k < params.size(); ++k) params[k].second.set_grad(gradient(k, s, comm.rank(), o));
    sharded.set_in_place(o.in_place);
    sharded.reduce_scatter(first);
    sharded.reduce_scatter(second);
    run.norms.push_back(sharded.finish_reduction());
    sharded.update(kLr, kMaxNorm, run.norms.back(), local);
    sharded.finish_step();
    if (o.shard_parameters) sharded.gather_parameters({0, 1, 2, 3});  // ZeRO-3's update leaves the shard
  }
  run.params = values(params);
  return run;
}

AdamWRun plain_adamw_run(int ranks, const ShardedRunOptions& o) {
  const optim::NamedParameters params = make_params(o);
  optim::AdamW adamw(params, adamw_options());
  std::vector<Tensor> tensors;
  for (const auto& [name, p] : params) tensors.push_back(p);
  AdamWRun run;
  for (int s = 0; s < o.steps; ++s) {
    for (size_t k = 0; k < params.size(); ++k) {
      Tensor g = gradient(k, s, 0, o);
      for (int r = 1; r < ranks; ++r) g.add_(gradient(k, s, r, o));  // in rank order
      params[k].second.set_grad(g);
    }
    run.norms.push_back(optim::clip_grad_norm(tensors, kMaxNorm));
    adamw.step(kLr);
    adamw.zero_grad();
  }
  run.params = values(params);
  return run;
}

void expect_same_run(const AdamWRun& got, const AdamWRun& want, const std::string& what) {
  EXPECT_EQ(got.norms, want.norms) << what << ": the gradient norms";
  ASSERT_EQ(got.params.size(), want.params.size()) << what;
  for (size_t k = 0; k < want.params.size(); ++k) {
    ASSERT_EQ(got.params[k].size(), want.params[k].size()) << what << ": " << kParams[k].first;
    for (size_t i = 0; i < want.params[k].size(); ++i)
      if (got.params[k][i] != want.params[k][i]) {
        ADD_FAILURE() << what << ": " << kParams[k].first << " element " << i << " is " << got.params[k][i]
                      << ", one AdamW's " << want.params[k][i];
        break;
      }
  }
}

}  // namespace tidal::testing
