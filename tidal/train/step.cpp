#include "tidal/train/step.h"

#include <cmath>
#include <optional>

#include "tidal/autograd/grad_mode.h"
#include "tidal/autograd/saved_tensor_log.h"
#include "tidal/dist/collectives.h"
#include "tidal/memory/chunk_loss.h"
#include "tidal/models/moe.h"
#include "tidal/ops/elementwise.h"
#include "tidal/parallel/context.h"
#include "tidal/parallel/data.h"
#include "tidal/parallel/grad_sync.h"
#include "tidal/train/mtp_batch.h"
#include "tidal/train/nan_guard.h"
#include "tidal/train/packed_batch.h"

namespace tidal::train {

StepResult train_step(int64_t it, const TrainArgs& args, Setup& s, profile::Profiler& profiler,
                      SavedTensors& first_saved, const std::function<void(int64_t m)>& after_forward) {
  dist::Communicator& comm = s.comm();  // all ranks: the gradients are summed over them
  dist::Communicator& data = s.groups->data();
  const int64_t accum = s.micro_batches;  // per rank
  // Instruction data (the targets are the labels) and --eod-mask-loss: each rank's loss is its share of
  // its micro-batch's masked mean (parallel/context.h, Note [Masked loss share]).
  const bool labelled = s.loader.dataset().has_labels();
  const bool masked = labelled || args.packing.eod_mask_loss;
  // Each micro-batch's share of the global batch: the same scale as one process accumulating them all.
  // With context parallelism each of the C ranks of a sample has the mean over its 2T/C tokens: a
  // C-th of the sample's mean (for instruction data, the share above).
  const int64_t global_micro_batches = accum * data.size() * (masked ? 1 : s.groups->context_size());
  const double aux_coef = s.model->config().router_aux_loss_coef;
  // Multi-token prediction: each depth's loss is its micro-batch's mean (the ranks of a context-parallel group
  // each add their share), weighted factor / depths and averaged over the micro-batches of the global batch.
  const int64_t mtp_depths = s.model->config().mtp_num_layers;
  const double mtp_scale =
      mtp_depths > 0 ? args.mtp_loss_scaling_factor / double(mtp_depths) / double(accum * data.size()) : 0.0;
  std::vector<double> mtp_sums(size_t(mtp_depths), 0.0);
  StepResult r;
  r.lr = optim::lr_at(it - 1, s.schedule);
  double loss_sum = 0;
  int64_t local_tokens = 0;      // this data-parallel rank's batches, B x T each
  models::take_dropped_slots();  // from here: this step's forwards (not a validation's)
  for (int64_t m = 0; m < accum; ++m) {
    const data::Batch batch = parallel::next_rank_batch(s.loader, args.micro_batch_size, data.rank(), data.size());
    local_tokens += batch.tokens.size(0) * (batch.tokens.size(1) - 1);  // (B, T + 1): B x T
    RankBatch local = rank_batch(batch.tokens, args.packing, s.eod(), s.groups->context_size(),
                                 s.groups->context_rank(), s.device, batch.pack_samples);  // this rank's chunks
    double share = 1.0;
    if (labelled) {
      const parallel::MaskedTargets masks = parallel::masked_targets(batch.labels, s.groups->context());
      local.labels = masks.targets.device() == s.device ? masks.targets : masks.targets.to(s.device);  // (B, 2T/C)
      share = masks.share;
    } else if (masked) {
      share = parallel::loss_share(local.targets, s.groups->context());
    }
    const memory::MtpInputs mtp = mtp_depths > 0
                                      ? mtp_inputs(batch.tokens, batch.labels, mtp_depths, s.groups->context_size(),
                                                   s.groups->context_rank(), s.device)
                                      : memory::MtpInputs{};
    Tensor loss, mtp_loss;
    if (s.offloader) s.offloader->begin_micro_batch();
    parallel::ParamGather::Scope gathered(s.param_gather.get());  // ZeRO-3: the parameters outside the layers
    {
      profile::Range phase("forward", profile::kPhase);
      std::optional<autograd::SavedTensorLog> log;
      if (first_saved.empty() || profiler.wants_saved_tensors(it, m)) log.emplace();
      memory::LmLosses losses =
          memory::lm_losses(*s.model, local.inputs, local.labels, args.memory.loss, aux_coef, local.docs, mtp);
      loss = losses.loss;
      mtp_loss = losses.mtp;
      for (size_t k = 0; k < losses.mtp_depths.size(); ++k)
        if (!loss.is_meta()) mtp_sums[k] += mtp.weights[k] * losses.mtp_depths[k].item<double>();
      if (log) {
        if (first_saved.empty()) first_saved = log->snapshot();
        profiler.set_saved_tensors(it, log->snapshot());
      }
    }
    after_forward(m);
    const double value = loss.is_meta() ? 0.0 : loss.item<double>();  // a dry run's loss has no value
    loss_sum += value * share;
    const bool finite = std::isfinite(value);
    if (args.check_for_nan && !finite && !args.skip_nonfinite_steps)
      stop_nonfinite(it, detail::str_cat("the loss is ", value, " (micro-batch ", m + 1, ")"), args,
                     s.model->named_parameters());
    profile::Range phase("backward", profile::kPhase);
    s.grad_sync->begin_micro_batch(m, accum);
    if (s.main_grads) s.main_grads->begin_backward(s.grad_sync->overlapping());
    // A skipped step's other micro-batches still take their samples (and their reductions still run:
    // they are collectives).
    const double scale = share / double(global_micro_batches);
    if (finite || !args.check_for_nan) {
      Tensor total = scale == 1.0 ? loss : mul(loss, scale);
      if (mtp_loss.defined()) total = add(total, mul(mtp_loss, mtp_scale));
      total.backward();
    }
    // --bf16: before a reduction the f32 sums become the gradients the reduction, clipping, the NaN
    // guard and AdamW read (train/main_grads.h): after the last backward, or after every one under
    // ZeRO-2/3, which reduce-scatter each micro-batch's.
    if (s.main_grads && s.grad_sync->reducing()) s.main_grads->expose(comm, s.groups->expert_data());
    s.grad_sync->end_micro_batch();  // the gradients summed over the ranks (parallel/grad_sync.h)
  }
  r.loss = dist::all_reduce_sum(comm, loss_sum) / double(global_micro_batches);  // the global batch's mean
  for (double sum : mtp_sums) r.mtp_losses.push_back(dist::all_reduce_sum(comm, sum) / double(accum * data.size()));
  // Variable lengths: each data-parallel rank's batches have their own T (the CP ranks of a group share it).
  if (args.variable_seq_lengths) r.tokens = int64_t(dist::all_reduce_sum(data, double(local_tokens)));
  if (s.model->config().moe_expert_capacity_factor > 0) {  // every rank's forwards: the global batch's
    const models::DroppedSlots d = models::take_dropped_slots();
    r.moe_slots = int64_t(dist::all_reduce_sum(comm, double(d.routed)));
    r.moe_dropped = int64_t(dist::all_reduce_sum(comm, double(d.dropped)));
  }
  profile::Range phase("optimizer", profile::kPhase);
  r.grad_norm = s.update->norm();
  // The loss and the norm are global, so every rank takes the same decision.
  if (args.check_for_nan) {
    r.nonfinite = s.update->nonfinite(r.loss, r.grad_norm);
    if (!r.nonfinite.empty() && !args.skip_nonfinite_steps)
      stop_nonfinite(it, r.nonfinite, args, s.model->named_parameters());
  }
  s.update->update(r.lr, r.grad_norm, r.nonfinite.empty());
  // --moe-router-enable-expert-bias: every rank's loads of this step (their tokens differ on every rank).
  if (s.model->config().moe_router_bias_update_rate > 0) models::update_expert_biases(*s.model, comm);
  return r;
}

double validation_loss(const TrainArgs& args, Setup& s) {
  TIDAL_ASSERT(s.data.valid != nullptr, "[train] validation without a validation split");
  s.model->train(false);
  double sum = 0, mean = 0;
  {
    NoGradGuard no_grad;
    // Every rank evaluates whole sequences (context parallelism splits the training steps only).
    s.model->set_context_parallel(nullptr);
    parallel::ParamGather::Scope gathered(s.param_gather.get());
    data::DataLoader loader(s.data.valid);
    // Pretraining data: the mean of the batches' means; instruction data: the mean over every trained token of
    // the evaluated batches.
    double trained = 0;
    for (int64_t i = 0; i < args.eval_iters; ++i) {
      const data::Batch batch = loader.next(args.micro_batch_size);
      const RankBatch b = rank_batch(batch.tokens, args.packing, s.eod(), 1, 0, s.device, batch.pack_samples);
      if (!batch.labels.defined()) {
        sum += memory::lm_loss(*s.model, b.inputs, b.labels, args.memory.loss, 0.0, b.docs).item<double>();
        continue;
      }
      const parallel::MaskedTargets m = parallel::masked_targets(batch.labels, nullptr);  // (B, T)
      if (m.count == 0) continue;  // no trained token: nothing to average
      sum += double(m.count) *
             memory::lm_loss(*s.model, b.inputs, m.targets.to(s.device), args.memory.loss, 0.0, b.docs).item<double>();
      trained += double(m.count);
    }
    // NaN for instruction data when no evaluated token is trained.
    mean = s.data.valid->has_labels() ? sum / trained : sum / double(args.eval_iters);
  }
  s.model->set_context_parallel(s.groups->context(), s.groups->ring());
  s.model->train(true);
  return mean;
}

}  // namespace tidal::train
