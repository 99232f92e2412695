#pragma once
// DeepSeek-V4's compressed sparse attention (CSA) compressor (transformers' DeepseekV4CSACompressor and
// DeepseekV4Indexer, the whole sequence at once), with their names:
//   entries: kv_proj and gate_proj (C -> 2 hd) and position_bias (m, 2 hd) give every token two halves; entry w
//     pools the first halves of window w - 1's m tokens with the second halves of its own (overlapping windows of
//     2m, stride m = compress_rates[compressed_sparse_attention]), kv_norm, rotated at position w m;
//   indexer (the lightning indexer): its own overlapping compressor at index_head_dim (kv_proj, gate_proj,
//     position_bias, kv_norm), queries q_b_proj(q_residual) (index_n_heads heads, rotated at their positions), and
//     score(i, w) = sum_h weights_proj(h_i)_h / sqrt(index_n_heads) * relu(q_ih . k_w) / sqrt(index_head_dim);
//     each query keeps the index_topk best of its complete windows' entries ((w + 1) m <= i + 1).
// The attention reads the sliding-window keys and the kept entries. The choice is an index: no gradient reaches
// the indexer (transformers' indexer parameters get none either), so it runs without autograd.
#include "tidal/models/config.h"
#include "tidal/models/deepseek_v4_compressor.h"
#include "tidal/nn/layers.h"

namespace tidal::models {

class CsaIndexer : public nn::Module {
 public:
  CsaIndexer(const ModelConfig& c, const nn::Init& init);
  // h (B, T, C), q_residual (B, T, q_lora_rank), the compressed layers' RoPE -> the indices (B, T, min(index_topk,
  // W)) i32 of the entries each query keeps, best first, -1 in the slots left empty.
  // The choice is a checkpoint decision (autograd/checkpoint.h): a checkpoint's replay takes the first run's.
  Tensor choose(const Tensor& h, const Tensor& q_residual, const RopeTables& rope, const ModelConfig& c) const;

 private:
  // The choice itself: queries scored in chunks of rows, so the (B, I, rows, W) scores stay small at any length.
  Tensor top_entries(const Tensor& h, const Tensor& q_residual, const RopeTables& rope, const ModelConfig& c) const;

  nn::Linear* kv_proj_;
  nn::Linear* gate_proj_;
  Tensor position_bias_;  // (m, 2 index_head_dim)
  nn::RMSNorm* kv_norm_;
  nn::Linear* q_b_proj_;
  nn::Linear* weights_proj_;  // scorer.weights_proj
};

class CsaCompressor : public nn::Module {
 public:
  CsaCompressor(const ModelConfig& c, const nn::Init& init);
  // h (B, T, C) normalized, q_residual (B, T, q_lora_rank), the compressed layers' RoPE -> the entries (B, 1, W, hd),
  // those each query keeps and, with `mask` (the composed core), their mask (B, 1, T, W) (W 0: kv undefined).
  CompressedEntries forward(const Tensor& h, const Tensor& q_residual, const RopeTables& rope, const ModelConfig& c,
                            bool mask) const;

 private:
  nn::Linear* kv_proj_;
  nn::Linear* gate_proj_;
  Tensor position_bias_;  // (m, 2 hd)
  nn::RMSNorm* kv_norm_;
  CsaIndexer* indexer_;
};

}  // namespace tidal::models
