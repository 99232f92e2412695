#pragma once
// Packed sequences: the documents of each row of a batch of token ids, as Megatron's
// get_ltor_masks_and_position_ids finds them. A new document starts after every EOD token (the EOD
// token ends the document it follows), or, for a neat pack (MindSpeed-LLM's --neat-pack), where the
// token's sample index changes. The starts feed attention's document mask
// (AttentionOptions::documents, --reset-attention-mask), the positions RoPE and learned position
// embeddings (--reset-position-ids).
#include <cstdint>
#include <vector>

#include "tidal/device.h"
#include "tidal/seam/kernel_args.h"
#include "tidal/tensor.h"

namespace tidal {

struct DocumentLayout {
  Tensor starts;     // (B, T) i32: the index of each token's document's first token
  Tensor positions;  // (B, T) i32: each token's position in its document, t - starts[b, t]
};

// ids (B, T) i64 or i32 on the host -> the layout (B, R) of the columns `rows` (global positions in
// order: a context-parallel rank's tokens; empty: all T), the starts keeping their global values (the
// attention's key frame is the whole sequence), on `device`. Worked out in host arrays and written
// once: on a CPU run the host is the device, and a dry run (meta) allocates just the two results.
DocumentLayout document_layout(const Tensor& ids, int64_t eod, const std::vector<int64_t>& rows = {},
                               Device device = Device::cpu());

// The same from a neat pack's sample indices (B, T) i64 or i32 on the host: each token's sample (1, 2, ...;
// 0 for padding), as MindSpeed's --neat-pack writes them in the attention-mask file. A document is a run of
// one index: no EOD is needed between samples, and the padding after them is a document of its own.
DocumentLayout sample_document_layout(const Tensor& samples, const std::vector<int64_t>& rows = {},
                                      Device device = Device::cpu());

// values (shape's element count) as a tensor of `shape` and dtype T on `device`: written in place on the
// CPU, copied from a host tensor to an accelerator, shape only on meta.
template <class T>
Tensor host_values_on(const std::vector<T>& values, const Shape& shape, Device device);

// The kernels' view of AttentionOptions::documents (ops/attention.h): none when undefined, and none on
// meta (the cost model counts the causal work, an upper bound).
DocumentMask document_mask(const Tensor& documents, int64_t key_offset);

// Refuses documents that are not (batch, rows) i32 on like's device, or a negative key_offset.
void check_documents(const char* op, const Tensor& documents, int64_t key_offset, int64_t batch, int64_t rows,
                     const Tensor& like);

}  // namespace tidal
