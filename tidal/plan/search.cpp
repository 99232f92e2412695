#include "tidal/plan/search.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "tidal/base/error.h"
#include "tidal/memory_stats.h"
#include "tidal/plan/candidates.h"
#include "tidal/plan/dry_run.h"
#include "tidal/plan/dry_run_pool.h"
#include "tidal/plan/oom_advice.h"

namespace tidal::plan {
namespace {

// The estimator is within a few percent of the dry run (tests); a candidate it puts this far above
// the target cannot fit.
constexpr double kEstimateSlack = 1.2;
// Candidates made exact by their own dry run, at most: first the fastest the estimator puts within
// the budget (until one fits), then Pareto members.
constexpr int kMaxVerified = 16;
// And of those the estimator puts above the budget, within its error: the fastest, until one fits.
constexpr int kMaxVerifiedAbove = 8;

// `a` as its dry run runs it: --load and --pretrained only give values (the model config has the shapes);
// `plain`: without --overlap-grad-reduce (the search's check of an overlapped candidate: its own dry run refuses).
train::TrainArgs check_args(train::TrainArgs a, bool plain = false) {
  a.checkpoint.load.clear();
  a.pretrained.clear();
  if (plain) {
    a.parallel.overlap_grad_reduce = false;
    a.parallel.bucket_size = 0;
  }
  return a;
}

// A dry run of `a` as planned (check_args), on the rank of its ranks with the highest peak. nullopt when the dry
// run refuses the configuration (--overlap-grad-reduce, whose peak depends on timing).
// `largest` false: rank 0 alone (its kernels time any rank: they differ only in the update's shard).
// `error` keeps the first refusal's message.
// `kept`: rank 0's kernels as kept_for_timing leaves them.
std::optional<DryRun> try_dry_run(train::TrainArgs given, bool largest = true, std::string* error = nullptr,
                                  bool kept = false) {
  const train::TrainArgs a = check_args(std::move(given));
  try {
    return a.parallel.world > 1 && largest ? dry_run_largest_rank(a) : dry_run(a, 0, kept);
  } catch (const Error& e) {
    if (error != nullptr && error->empty()) *error = e.what();
    return std::nullopt;
  }
}

// The configuration whose kernels time `a`: the same without offload, the swap optimizer and overlapped
// gradient reduction (they add or move only copies and collectives, which the cost model times from
// their bytes), and under ZeRO-1 without sharding, under ZeRO-3 as ZeRO-2 (the same kernels but the
// update's, which the cost model scales to the shard: cost_model.h).
parallel::ShardingStrategy kernel_sharding(parallel::ShardingStrategy s) {
  return s == parallel::ShardingStrategy::optim                ? parallel::ShardingStrategy::no_shard
         : s == parallel::ShardingStrategy::optim_grads_params ? parallel::ShardingStrategy::optim_grads
                                                               : s;
}
train::TrainArgs kernel_args(const train::TrainArgs& a) {
  train::TrainArgs k = check_args(a, true);
  k.memory.offload = memory::OffloadConfig{};
  k.memory.swap_optimizer = memory::SwapOptimizerConfig{};
  k.parallel.overlap_param_gather = false;
  k.parallel.sharding = kernel_sharding(a.parallel.sharding);
  return k;
}
// Whether `a`'s kernel dry run is `a` itself (its peak exact).
bool same_kernels(const train::TrainArgs& a) {
  return !a.memory.offload.enabled && !a.memory.swap_optimizer.on && !a.parallel.overlap_grad_reduce &&
         kernel_sharding(a.parallel.sharding) == a.parallel.sharding;
}

// Expert and context parallelism: E and C.
std::string parallel_key(const train::TrainArgs& a) {
  return "|" + std::to_string(a.parallel.expert) + "|" + std::to_string(a.parallel.context);
}

// Note [A loss mode from another's run]: a loss mode changes only the LM head's and the loss's kernels
// (StepKernel::head), and those depend only on the mode and the tokens a rank holds (micro-batch, context
// parallelism). So the kernels of a configuration in loss mode L are its run's in another mode with the head's
// replaced by those of any run in mode L on as many tokens (with_head_of; tests/integration/cost_model_test.cpp
// compares them with the real run's, record by record). The search dry-runs each body (body_key) and each head
// (head_key) once. Candidates whose peak comes from their timing run (exact) still get their own run.
std::string body_key(const train::TrainArgs& a) {
  return a.memory.recompute.describe() + "|" + name(a.attention) + "|" + std::to_string(a.micro_batch_size) + "|" +
         parallel::sharding_name(kernel_sharding(a.parallel.sharding)) + parallel_key(a);
}
std::string head_key(const train::TrainArgs& a) {
  return a.memory.loss.describe() + "|" + std::to_string(a.micro_batch_size) + "|" + std::to_string(a.parallel.context);
}
// The configuration whose kernels time `a` (kernel_args): its body in its loss mode.
std::string kernel_key(const train::TrainArgs& a) { return body_key(a) + "|" + a.memory.loss.describe(); }
// Everything but the recompute: the candidates that differ only in their recompute rung share it.
std::string outer_key(const train::TrainArgs& a) {
  return a.memory.loss.describe() + "|" + a.memory.offload.describe() + "|" +
         std::to_string(a.memory.offload.prefetch_depth) + "|" + std::to_string(int(a.memory.swap_optimizer.on)) + "|" +
         name(a.attention) + "|" + std::to_string(a.micro_batch_size) + "|" +
         parallel::sharding_name(a.parallel.sharding) + "|" + std::to_string(int(a.parallel.overlap_grad_reduce)) +
         parallel_key(a);
}

void set_exact(PlanCandidate& c, const DryRun& d, const PlanSearch& r) {
  c.device_peak = d.device.peak_allocated;
  c.host_peak = d.host.peak_allocated;
  c.exact = true;
  c.checked = true;
  c.fits = c.device_peak <= r.target && (r.host_budget == 0 || c.host_peak <= r.host_budget);
}

std::string ms(double s) {
  char b[32];
  std::snprintf(b, sizeof b, s >= 10 ? "%.1f s" : "%.0f ms", s >= 10 ? s : s * 1000);
  return b;
}
std::string percent(double f) {
  char b[16];
  std::snprintf(b, sizeof b, "%.0f%%", f * 100);
  return b;
}

std::string explain(const PlanCandidate& c, const train::TrainArgs& g) {
  std::vector<std::string> parts;
  const train::TrainArgs& a = c.args;
  const StepTime& t = c.time;
  if (a.memory.loss.chunked && !g.memory.loss.chunked)
    parts.push_back("chunked loss: the logits exist a chunk at a time");
  if (a.attention != g.attention) parts.push_back(std::string(name(a.attention)) + " attention");
  if (t.recompute_s > 0)
    parts.push_back("recompute (" + c.recompute + ") replays " + ms(t.recompute_s) + ", " +
                    percent(t.recompute_s / std::max(t.total_s, 1e-12)) + " of the step");
  const bool offload = a.memory.offload.enabled, swap = a.memory.swap_optimizer.on;
  if (offload || swap)
    parts.push_back(std::string(offload && swap ? "offload (" + memory::name(a.memory.offload.policy) +
                                                      ") and the swap optimizer hide "
                                : offload ? "offload (" + memory::name(a.memory.offload.policy) + ") hides "
                                          : "the swap optimizer hides ") +
                    percent(t.hidden_copy_fraction) + " of their " + ms(t.copy_s) + " of copies at this size" +
                    (t.exposed_copy_s > 0 ? " (" + ms(t.exposed_copy_s) + " exposed)" : ""));
  if (a.micro_batch_size != g.micro_batch_size)
    parts.push_back("micro-batch " + std::to_string(a.micro_batch_size) + ": " +
                    std::to_string(a.global_batch_size / a.micro_batch_size / a.parallel.data()) + " per rank a step");
  if (a.parallel.expert > 1)
    parts.push_back("expert parallel " + std::to_string(a.parallel.expert) + ": " +
                    std::to_string(a.model.num_experts / a.parallel.expert) + " experts a rank, all-to-all " +
                    ms(t.all_to_all_s));
  if (a.parallel.context > 1)
    parts.push_back("context parallel " + std::to_string(a.parallel.context) + ": " +
                    std::to_string(a.seq_length / a.parallel.context) + " tokens a rank, " +
                    (a.attention == AttentionKernel::eager ? "K/V all-gather " : "ring exchange ") + ms(t.ring_s) +
                    ", " + ms(t.exposed_ring_s) + " exposed");
  if (a.parallel.sharding != parallel::ShardingStrategy::no_shard)
    parts.push_back(std::string(parallel::sharding_name(a.parallel.sharding)) +
                    " sharding: " + ms(t.comm_s - t.all_to_all_s - t.ring_s) + " of collectives, " +
                    ms(t.exposed_comm_s - t.all_to_all_s - t.exposed_ring_s) + " exposed");
  if (parts.empty()) return "no memory feature beyond the given run's";
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
}

// Why nothing fits, from the estimator's view of the smallest candidate (its peak its dry run's when it
// has one). Past sharding, the triage order's second step names expert parallelism (MoE models) for
// the states and context parallelism for the activations.
std::string nothing_fits(const PlanCandidate& s, int64_t target) {
  const StepPeak p = predict_step_peak(s.args.model, triage_settings(s.args));
  // Gradients are f32 (the f32 sums under --bf16): 4 bytes an element beside 2- or 4-byte parameters.
  const int64_t gradients = p.parameters * (s.args.precision.bf16 ? 2 : 1);
  const int64_t fixed = p.parameters + gradients + p.optimizer_states;
  const models::ModelConfig& m = s.args.model;
  std::string out = "Nothing fits " + format_bytes(target) + ": the smallest candidate (" +
                    (s.flags.empty() ? std::string("as given") : s.flags) + ") needs " + format_bytes(s.device_peak) +
                    (s.checked ? " (its dry run)." : " (the estimator).");
  if (fixed >= target) {
    const int64_t ranks = (fixed + target - 1) / std::max<int64_t>(target, 1) + 1;
    out += " Parameters, gradients and optimizer states alone take " + format_bytes(fixed) +
           ": shard them over >= " + std::to_string(ranks) +
           " ranks (mpirun -np N with --use-distributed-optimizer or --data-parallel-sharding-strategy "
           "optim_grads_params; tidal plan --data-parallel-size N), or a larger device.";
    if (m.is_moe() && s.args.parallel.expert < m.num_experts)
      out += " Expert parallelism divides the experts too: --expert-model-parallel-size E holds " +
             std::to_string(m.num_experts) + " / E experts of each MoE layer a rank (tidal plan searches E with " +
             "--data-parallel-size N).";
  } else {
    out += " Its activations take " + format_bytes(p.activations) + " and its logits " + format_bytes(p.logits) +
           ": a shorter sequence, a smaller micro-batch, a larger device";
    const int64_t c = s.args.parallel.context;
    if (s.args.seq_length % (4 * c) == 0)
      out +=
          ", or context parallelism over more ranks (--context-parallel-size C: a rank holds seq / C of "
          "every sequence's tokens, --seq-length a multiple of 2C; tidal plan searches C with "
          "--data-parallel-size N)";
    out += ".";
  }
  return out;
}

// The search in its phases: estimate every candidate, time those that may fit (kernel dry runs
// shared across candidates), choose the fastest whose peak a dry run checked, then the Pareto front
// and the answer's words.
class Search {
 public:
  Search(const train::TrainArgs& given, const SearchOptions& o) : given_(given), o_(o) {
    TIDAL_CHECK(o.budget > 0, "tidal plan: the memory budget must be positive");
    TIDAL_CHECK(o.headroom >= 0 && o.headroom < 1, "tidal plan: the headroom must be in [0, 1), got ", o.headroom);
    r_.budget = o.budget;
    r_.target = int64_t(double(o.budget) * (1 - o.headroom));
    TIDAL_CHECK(o.host_budget >= 0, "tidal plan: the host memory budget must be >= 0, got ", o.host_budget);
    const int dp = std::max(1, given.parallel.data());
    TIDAL_CHECK(given.global_batch_size % (given.micro_batch_size * dp) == 0, "tidal plan: ", "--global-batch-size ",
                given.global_batch_size, " is not a multiple of --micro-batch-size ", given.micro_batch_size, " x ", dp,
                " data-parallel ranks, so no candidate could run: give ",
                "a global batch of micro-batch x accumulation steps x ranks (e.g. --global-batch-size ",
                given.micro_batch_size * dp, ")");
    r_.host_budget = o.host_budget;
  }

  PlanSearch run() {
    phase(SearchProgress::Phase::estimate);
    estimate();
    phase(SearchProgress::Phase::time);
    time();
    phase(SearchProgress::Phase::verify);
    choose();
    mark_pareto();
    workers_.reset();
    phase(SearchProgress::Phase::done);
    for (PlanCandidate& c : r_.candidates) c.why = c.flags.empty() ? "as given" : explain(c, given_);
    r_.given.why = "as given";
    if (r_.chosen < 0) say_why_nothing_fits();
    return std::move(r_);
  }

 private:
  // The progress hook's phase: the time spent in the one that ends is added to its total.
  void phase(SearchProgress::Phase next) {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - phase_start_).count();
    switch (progress_.phase) {
      case SearchProgress::Phase::estimate: progress_.estimate_s += s; break;
      case SearchProgress::Phase::time: progress_.time_s += s; break;
      case SearchProgress::Phase::verify: progress_.verify_s += s; break;
      case SearchProgress::Phase::done: break;
    }
    phase_start_ = now;
    progress_.phase = next;
    if (next == SearchProgress::Phase::done) report();
  }
  void report() {
    if (o_.progress) o_.progress(progress_);
  }

  // Every candidate with the estimator's step peak (cheap).
  void estimate() {
    std::vector<CandidateConfig> configs = enumerate_candidates(given_, o_.disk_dir);
    r_.enumerated = int64_t(configs.size());
    progress_.candidates = r_.enumerated;
    report();
    all_.reserve(configs.size());
    for (CandidateConfig& c : configs) {
      if (++progress_.estimated % 8192 == 0) report();
      PlanCandidate p;
      p.index = all_.size();
      p.args = std::move(c.args);
      p.flags = std::move(c.flags);
      p.recompute = std::move(c.recompute);
      p.recompute_rung = c.recompute_rung;
      p.estimated_peak = predict_step_peak(p.args.model, triage_settings(p.args)).total;
      p.device_peak = p.estimated_peak;
      p.fits = p.device_peak <= r_.target;
      all_.push_back(std::move(p));
    }
  }

  // The kernel dry run of `a` and what the search keeps of it.
  static DryRunOutcome kernel_dry_run(const train::TrainArgs& a) {
    DryRunOutcome o;
    o.run = try_dry_run(kernel_args(a), false, &o.error, true);
    if (o.run) o.run->saved = {};
    return o;
  }

  // Whether `a`'s peak comes from its timing run (time(c) below): then that run must be its own, not made.
  bool exact_from_timing(const train::TrainArgs& a) const {
    return same_kernels(a) && (given_.parallel.world == 1 || !a.parallel.sharded());
  }

  // `a`'s kernels from a run of its body and one of its head, when both were run (Note [A loss mode from another's
  // run]): the kernels its own run would record, in kept_for_timing's order. Its peaks and activations are the
  // body run's (only its kernels are read).
  std::optional<DryRun> made_from_parts(const train::TrainArgs& a) const {
    const auto body = bodies_.find(body_key(a));
    const auto head = heads_.find(head_key(a));
    if (body == bodies_.end() || head == heads_.end()) return std::nullopt;
    const DryRun& b = *runs_.at(body->second);
    const DryRun& h = *runs_.at(head->second);
    DryRun d = b;
    d.kernels = with_head_of(b.kernels, h.kernels);
    for (const StepKernel& k : b.kernels) d.recorded_kernels -= k.head ? k.count : 0;
    for (const StepKernel& k : h.kernels) d.recorded_kernels += k.head ? k.count : 0;
    return d;
  }

  // The kernel dry run of `a` (one per kernel key, cached): made from the runs of its parts, run ahead (ahead_),
  // or here. `exact`: the run must be its own.
  const std::optional<DryRun>& kernels_of(const train::TrainArgs& a, bool exact) {
    const std::string key = kernel_key(a);
    auto it = runs_.find(key);
    const bool made = made_.count(key) > 0;
    if (it != runs_.end() && !(exact && made)) return it->second;
    if (it == runs_.end() && !exact)
      if (std::optional<DryRun> d = made_from_parts(a)) {
        dry_run_kernels_ += d->recorded_kernels;  // the work it stands for: the same candidates are timed
        ++r_.made_runs;
        made_.insert(key);
        return runs_.emplace(key, std::move(d)).first->second;
      }
    DryRunOutcome o;
    if (auto ahead = ahead_.find(key); ahead != ahead_.end()) {
      o = std::move(ahead->second);
      ahead_.erase(ahead);
    } else {
      report();
      o = kernel_dry_run(a);
      ++progress_.dry_runs;
    }
    if (o.run && !made) dry_run_kernels_ += o.run->recorded_kernels;
    if (!o.run && dry_run_error_.empty()) dry_run_error_ = o.error;
    ++r_.dry_runs;
    if (o.run) {
      bodies_.emplace(body_key(a), key);
      heads_.emplace(head_key(a), key);
    }
    made_.erase(key);
    return runs_.insert_or_assign(key, std::move(o.run)).first->second;
  }

  // With several workers: the kernel dry runs of `candidates`' configurations not run yet, at most `most`
  // of them, at once (on the worker processes), kept in ahead_ until kernels_of takes them — as it would have
  // run them, so the budget of SearchOptions::dry_run_kernels counts only those taken.
  void run_ahead(const std::vector<size_t>& candidates, size_t most) {
    if (o_.dry_run_workers <= 1) return;
    // As kernels_of will take them, in order: a candidate whose body and head are run by then is made from them.
    std::vector<std::string> keys;
    std::vector<size_t> jobs;                   // indexes into all_
    std::set<std::string> bodies, heads, made;  // run (or made) by then, besides bodies_, heads_ and runs_
    for (size_t i : candidates) {
      if (jobs.size() >= most) break;
      const train::TrainArgs& a = i == kGiven ? r_.given.args : all_[i].args;
      std::string key = kernel_key(a);
      const bool exact = exact_from_timing(a);
      const bool run = (runs_.count(key) > 0 && made_.count(key) == 0) || ahead_.count(key) > 0 ||
                       std::find(keys.begin(), keys.end(), key) != keys.end();
      const bool known = run || ((runs_.count(key) > 0 || made.count(key) > 0) && !exact);
      const bool parts = (bodies_.count(body_key(a)) > 0 || bodies.count(body_key(a)) > 0) &&
                         (heads_.count(head_key(a)) > 0 || heads.count(head_key(a)) > 0);
      if (run || (!known && !exact && parts)) {
        bodies.insert(body_key(a));
        heads.insert(head_key(a));
        if (!run) made.insert(key);
        continue;
      }
      if (known) continue;
      bodies.insert(body_key(a));
      heads.insert(head_key(a));
      keys.push_back(std::move(key));
      jobs.push_back(i == kGiven ? 0 : i);  // all_[0] is the given run
    }
    if (jobs.size() <= 1) return;  // one: here, when it is needed
    std::vector<DryRunOutcome> outcomes = workers().run(jobs, [this](size_t) {
      ++progress_.dry_runs;
      report();
    });
    for (size_t k = 0; k < keys.size(); ++k) ahead_.emplace(std::move(keys[k]), std::move(outcomes[k]));
  }
  static constexpr size_t kGiven = SIZE_MAX;  // run_ahead's index of the given run

  // The worker processes (dry_run_pool.h), made once every candidate is enumerated: their job `id` is candidate id's
  // kernel dry run, or past all_.size() one rank's dry run of a candidate's own configuration (check_run).
  DryRunWorkers& workers() {
    if (!workers_) workers_.emplace(o_.dry_run_workers, [this](size_t id) { return worker_job(id); });
    return *workers_;
  }
  DryRunOutcome worker_job(size_t id) const {
    if (id < all_.size()) return kernel_dry_run(all_[id].args);
    id -= all_.size();
    const size_t ranks = size_t(std::max(1, given_.parallel.world));
    const size_t check = id / ranks;
    return rank_dry_run(check_args(all_[check / 2].args, check % 2 == 1), int(id % ranks), false);
  }
  // all_[index]'s own dry run (its largest rank: dry_run_largest_rank), on the workers when there are several.
  std::optional<DryRun> check_run(size_t index, bool plain) {
    const train::TrainArgs a = check_args(all_[index].args, plain);
    if (o_.dry_run_workers <= 1) return try_dry_run(a, true);
    try {
      const std::vector<int> ranks = largest_rank_candidates(a);
      const size_t world = size_t(std::max(1, given_.parallel.world));
      std::vector<size_t> jobs;
      for (const int r : ranks) jobs.push_back(all_.size() + (index * 2 + (plain ? 1 : 0)) * world + size_t(r));
      return largest_of(ranks, workers().run(jobs));
    } catch (const Error&) {  // a refusal, as try_dry_run's
      return std::nullopt;
    }
  }

  void time(PlanCandidate& c) {
    const bool exact = exact_from_timing(c.args);
    const std::optional<DryRun>& d = kernels_of(c.args, exact);
    if (!d) return;
    // Rank 0's peak is every rank's without sharding; sharded, the largest rank's is verified below.
    if (exact) set_exact(c, *d, r_);
    c.time = predict_step_time(*d, c.args, o_.profile);
    c.timed = true;
    ++progress_.timed;
    if ((c.checked ? c.fits : c.estimated_peak <= r_.target) &&
        (progress_.best_s == 0 || c.time.total_s < progress_.best_s)) {
      progress_.best_s = c.time.total_s;
      progress_.best_flags = c.flags.empty() ? "as given" : c.flags;
    }
  }

  // The given run as given, exact and timed whatever its size; then those that may fit: per
  // combination of the other switches the first rung of the recompute ladder that fits (the fastest
  // of its ladder, unless a rung below it fits after all), then the others while the dry runs stay
  // within their work. The timed ones, fastest first.
  void time() {
    std::vector<size_t> may_fit;
    std::map<std::string, int> first_rung;
    for (size_t i = 1; i < all_.size(); ++i) {
      if (double(all_[i].estimated_peak) > double(r_.target) * kEstimateSlack) continue;
      may_fit.push_back(i);
      if (all_[i].estimated_peak <= r_.target) {
        auto [it, fresh] = first_rung.emplace(outer_key(all_[i].args), all_[i].recompute_rung);
        if (!fresh) it->second = std::min(it->second, all_[i].recompute_rung);
      }
    }
    auto first = [&](size_t i) {
      auto it = first_rung.find(outer_key(all_[i].args));
      return it != first_rung.end() && it->second == all_[i].recompute_rung;
    };
    progress_.may_fit = int64_t(may_fit.size());
    report();
    r_.given = all_.front();
    // Every first rung is timed: their dry runs (and the given run's) all at once.
    std::vector<size_t> firsts = {kGiven}, others;
    for (size_t i : may_fit) (first(i) ? firsts : others).push_back(i);
    run_ahead(firsts, SIZE_MAX);
    time(r_.given);
    if (!r_.given.exact)
      if (std::optional<DryRun> d = check_run(0, false)) set_exact(r_.given, *d, r_);
    for (size_t i : firsts) {
      if (i == kGiven) continue;
      ++progress_.considered;
      time(all_[i]);
    }
    // The other rungs while the budget lasts: a worker's share of dry runs ahead at a time.
    for (size_t k = 0; k < others.size(); ++k) {
      const size_t i = others[k];
      ++progress_.considered;
      const std::string key = kernel_key(all_[i].args);
      const bool known = runs_.count(key) > 0;
      if (!known && dry_run_kernels_ >= o_.dry_run_kernels) continue;
      if (!known && ahead_.count(key) == 0)
        run_ahead(std::vector<size_t>(others.begin() + std::ptrdiff_t(k), others.end()), size_t(o_.dry_run_workers));
      time(all_[i]);
    }
    ahead_.clear();
    if (r_.given.timed) r_.candidates.push_back(r_.given);  // as given is a candidate too (no flags)
    for (size_t i = 1; i < all_.size(); ++i)
      if (all_[i].timed) r_.candidates.push_back(all_[i]);
    auto by_time = [](const PlanCandidate& a, const PlanCandidate& b) {  // equal times: the smaller first
      return a.time.total_s < b.time.total_s || (a.time.total_s == b.time.total_s && a.device_peak < b.device_peak);
    };
    std::stable_sort(r_.candidates.begin(), r_.candidates.end(), by_time);
  }

  // `c`'s peak by its own exact dry run where it has one. --overlap-grad-reduce has none (its peak
  // depends on when the buckets' reductions end): the dry run without it, plus what the estimator
  // says the overlap changes, so that only the buckets are estimated (the estimator alone runs low
  // where backward's temporaries dominate, at long sequences with small hidden sizes).
  void verify(PlanCandidate& c) {
    ++progress_.checks;
    report();
    if (std::optional<DryRun> d = check_run(c.index, false)) return set_exact(c, *d, r_);
    if (!c.args.parallel.overlap_grad_reduce) return;
    const train::TrainArgs plain = check_args(c.args, true);
    const std::optional<DryRun> d = check_run(c.index, true);
    if (!d) return;
    // What the overlap changes by the estimator: the buckets in flight without sharding (more), each
    // bucket's whole gradients freed once reduce-scattered under ZeRO-2/3 (less).
    // It frees no more than the gradients the dry run held (a bound on the estimator's error).
    const int64_t held = d->device.category[size_t(MemoryCategory::gradient)].peak;
    const int64_t overlap =
        std::max<int64_t>(-held, c.estimated_peak - predict_step_peak(plain.model, triage_settings(plain)).total);
    c.device_peak = d->device.peak_allocated + overlap;
    c.host_peak = d->host.peak_allocated;
    c.checked = true;
    c.fits = c.device_peak <= r_.target && (r_.host_budget == 0 || c.host_peak <= r_.host_budget);
  }

  // The fastest that fits, checked. At most kMaxVerified dry runs: past them only candidates already
  // checked are taken (the estimator runs low where backward's temporaries dominate, so its peak alone
  // may not fit), and only when none is does the choice fall back to the estimator's peak. Candidates
  // the estimator puts above the target by less than its error are verified too (at most
  // kMaxVerifiedAbove, apart, so that they do not use up the others'): its peak runs high as well as
  // low (Qwen3-8B at 32k with CP 2: 82 GiB estimated, 71 GiB checked).
  void choose() {
    int verified_above = 0;
    for (size_t i = 0; i < r_.candidates.size() && r_.chosen < 0; ++i) {
      PlanCandidate& c = r_.candidates[i];
      if (c.checked ? !c.fits : double(c.estimated_peak) > double(r_.target) * kEstimateSlack) continue;
      int& count = c.fits ? verified_ : verified_above;
      if (!c.checked && count < (c.fits ? kMaxVerified : kMaxVerifiedAbove)) {
        ++count;
        verify(c);
      }
      if (c.fits && c.checked) r_.chosen = int(i);
    }
    for (size_t i = 0; i < r_.candidates.size() && r_.chosen < 0 && r_.host_budget == 0; ++i)  // a host budget
      if (r_.candidates[i].fits) r_.chosen = int(i);  // needs the dry run's host peak
  }

  // The Pareto front of device peak against step time (its members checked while verifications last).
  void mark_pareto() {
    int64_t smallest = INT64_MAX;
    for (PlanCandidate& c : r_.candidates) {
      if (c.device_peak < smallest && !c.checked && verified_ < kMaxVerified) {
        ++verified_;
        verify(c);
      }
      c.pareto = c.device_peak < smallest;
      smallest = std::min(smallest, c.device_peak);
    }
  }

  void say_why_nothing_fits() {
    const auto it = std::min_element(all_.begin(), all_.end(), [](const PlanCandidate& a, const PlanCandidate& b) {
      return a.estimated_peak < b.estimated_peak;
    });
    r_.smallest = *it;
    // The estimator put it within the target, but the dry runs found more: the smallest they measured.
    for (const PlanCandidate& c : r_.candidates)
      if (it->estimated_peak <= r_.target && c.checked &&
          (!r_.smallest.checked || c.device_peak < r_.smallest.device_peak))
        r_.smallest = c;
    r_.nothing_fits = nothing_fits(r_.smallest, r_.target);
    // Within the budget by the estimator, yet nothing timed: the dry runs refused the configuration.
    if (r_.smallest.estimated_peak <= r_.target && r_.candidates.empty() && !dry_run_error_.empty())
      r_.nothing_fits = "Nothing could be timed: the smallest candidate (" +
                        (r_.smallest.flags.empty() ? std::string("as given") : r_.smallest.flags) + ") needs about " +
                        format_bytes(r_.smallest.estimated_peak) + ", within " + format_bytes(r_.target) +
                        ", but the dry runs refuse the configuration: " + dry_run_error_;
    // Candidates whose device peak fits but whose host peak does not.
    int64_t host = INT64_MAX;
    for (const PlanCandidate& c : r_.candidates)
      if (c.exact && c.device_peak <= r_.target) host = std::min(host, c.host_peak);
    if (r_.host_budget > 0 && host != INT64_MAX)
      r_.nothing_fits += " Some candidates fit the device but not the host budget, " + format_bytes(r_.host_budget) +
                         " (the smallest needs " + format_bytes(host) + " of host memory): raise --host-memory" +
                         (o_.disk_dir.empty() ? ", or give --offload-dir DIR to search offload to disk." : ".");
  }

  const train::TrainArgs& given_;
  const SearchOptions& o_;
  PlanSearch r_;
  std::vector<PlanCandidate> all_;                     // every candidate, the given one first
  std::map<std::string, std::optional<DryRun>> runs_;  // kernel dry runs by kernel key
  std::map<std::string, DryRunOutcome> ahead_;         // run ahead (run_ahead), not taken yet
  std::optional<DryRunWorkers> workers_;               // workers(): ended with the checks
  std::set<std::string> made_;                         // keys of runs_ made from parts (made_from_parts)
  std::map<std::string, std::string> bodies_, heads_;  // body_key / head_key -> the key of a run of it
  int64_t dry_run_kernels_ = 0;  // recorded by the dry runs so far: their work, counted deterministically
  std::string dry_run_error_;    // the first kernel dry run's refusal, if any
  int verified_ = 0;             // candidates made exact by a dry run of their own
  SearchProgress progress_;
  std::chrono::steady_clock::time_point phase_start_ = std::chrono::steady_clock::now();
};

}  // namespace

PlanSearch search_plans(const train::TrainArgs& given, const SearchOptions& o) { return Search(given, o).run(); }

}  // namespace tidal::plan
