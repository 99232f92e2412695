#include "tidal/train/metrics.h"

#include <algorithm>

#include "tidal/io/atomic_file.h"

namespace tidal::train {
namespace {

nlohmann::json by_category(const std::array<int64_t, kNumMemoryCategories>& v) {
  nlohmann::json j;
  for (int i = 0; i < kNumMemoryCategories; ++i) j[std::string(category_name(MemoryCategory(i)))] = v[size_t(i)];
  return j;
}

}  // namespace

MetricsWriter::MetricsWriter(std::string path, nlohmann::json config)
    : path_(std::move(path)), stream_(!path_.empty() && !io::replaces_file(path_)), config_(std::move(config)) {}

void MetricsWriter::add_step(const StepMetrics& m) { steps_.push_back(m); }

double MetricsWriter::median_step_ms() const {
  if (steps_.empty()) return 0;
  std::vector<double> v;
  for (const StepMetrics& s : steps_) v.push_back(s.step_ms);
  std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
  return v[v.size() / 2];
}

double MetricsWriter::mean_tokens_per_s() const {
  double sum = 0;
  for (const StepMetrics& s : steps_) sum += s.tokens_per_s;
  return steps_.empty() ? 0 : sum / double(steps_.size());
}

void MetricsWriter::set_summary(double final_loss, double final_val_loss, const MemoryStats& device,
                                const MemoryStats& host) {
  summary_["median_step_ms"] = median_step_ms();
  summary_["tokens_per_s"] = mean_tokens_per_s();
  summary_["final_loss"] = final_loss;
  summary_["final_val_loss"] = final_val_loss;
  summary_["device_peak_bytes"] = device.peak_allocated;
  summary_["device_peak_reserved_bytes"] = device.peak_reserved;
  summary_["host_peak_bytes"] = host.peak_allocated;
  summary_["host_reserved_bytes"] = host.reserved;            // held from the system at the end
  summary_["host_pool_reserved_bytes"] = host.pool_reserved;  // of which one pool (pinned memory on CUDA)
  summary_["peak_breakdown_bytes"] = by_category(device.at_peak);
  std::array<int64_t, kNumMemoryCategories> peaks{};
  for (int i = 0; i < kNumMemoryCategories; ++i)
    peaks[size_t(i)] =
        i == int(MemoryCategory::host_offload) ? host.category[size_t(i)].peak : device.category[size_t(i)].peak;
  summary_["peak_bytes_by_category"] = by_category(peaks);
}

void MetricsWriter::write(bool last) const {
  if (path_.empty() || (stream_ && !last)) return;
  nlohmann::json j;
  j["config"] = config_;
  j["steps"] = nlohmann::json::array();
  for (const StepMetrics& s : steps_) {
    j["steps"].push_back({{"iteration", s.iteration},
                          {"loss", s.loss},
                          {"lr", s.lr},
                          {"grad_norm", s.grad_norm},
                          {"step_ms", s.step_ms},
                          {"tokens_per_s", s.tokens_per_s},
                          {"device_peak_bytes", s.device_peak_bytes}});
    if (!s.mtp_losses.empty()) j["steps"].back()["mtp_losses"] = s.mtp_losses;
  }
  j["summary"] = summary_;
  const std::string text = j.dump(1) + "\n";
  io::write_atomically(path_, [&](int fd) { io::write_all(fd, text.data(), text.size(), path_); });
}

double training_flops_per_token(const models::ModelConfig& c, int64_t seq_length) {
  const double d = double(c.hidden_size), hd = double(c.head_size()), h = double(c.num_attention_heads);
  const double kv = double(c.kv_heads()), v = double(c.vocab_size);
  double macs = 0;  // multiply-adds per token, forward
  const double qk = double(c.qk_head_size()), dv = double(c.v_head_size());
  // The MTP depths (models/mtp.h) are layers numbered after the last, each with eh_proj and another LM head.
  for (int64_t l = 0; l < c.num_hidden_layers + c.mtp_num_layers; ++l) {
    if (l >= c.num_hidden_layers) macs += 2 * d * d + d * v;
    if (c.is_mla()) {  // q (through its LoRA), kv_a, kv_b and o projections
      const double qr = double(c.q_lora_rank), kvr = double(c.kv_lora_rank);
      macs += (qr > 0 ? d * qr + qr * h * qk : d * h * qk) + d * (kvr + double(c.qk_rope_head_dim)) +
              kvr * h * (double(c.qk_nope_head_dim) + dv) + h * dv * d;
    } else {
      macs += d * (h + 2 * kv) * hd + h * hd * d;  // q, k, v, o projections
    }
    const int64_t window = c.attention_window(l);
    const double keys = double(window > 0 ? std::min(window, seq_length) : seq_length);
    macs += keys * h * (qk + dv);  // q k^T and p v
    if (c.is_moe_layer(l))
      macs += d * double(c.num_experts) +
              3.0 * d * double(c.moe_intermediate_size) * double(c.num_experts_per_tok + c.n_shared_experts);
    else
      macs += (c.is_gpt2() ? 2.0 : 3.0) * d * double(c.intermediate_size);
  }
  macs += d * v;  // LM head
  return 3.0 * 2.0 * macs;
}

}  // namespace tidal::train
