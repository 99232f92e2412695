#pragma once
// Backends register themselves. A backend's .cpp files register its Kernels and its DeviceRuntime
// for its DeviceType while the program starts, so adding a device (backend/cuda/) edits no switch
// and needs no #ifdef: building its folder registers it (PyTorch registers device guards the same
// way; ggml-backend keeps a central #ifdef list instead). The library is linked whole
// (CMakeLists.txt): a static archive would drop a registrar that nothing refers to.
//
// Each backend .cpp holds one registrar at namespace scope, made before every other static object
// (init_priority), so a static tensor anywhere still finds its device:
//   [[gnu::init_priority(kRegisterBackends)]] const RegisterKernels<CpuKernels> registered(DeviceType::cpu);
#include <type_traits>
#include <vector>

#include "tidal/device.h"
#include "tidal/seam/kernels.h"
#include "tidal/seam/runtime.h"

namespace tidal {

// Every Kernels method, in kernels.h's order (tests/unit/seam/missing_kernels_test.cpp checks the
// list against kernels.h).
// clang-format off
#define TIDAL_KERNEL_NAMES(X)                                                                               \
  X(matmul_operand_ok) X(matmul_kept_workspace) X(norm_row_chunks) X(flash_forward_workspace)            \
  X(flash_backward_workspace) X(sparse_attention_backward_workspace)                                     \
  X(copy_from_host) X(copy_to_host)                                                                       \
  X(unary) X(binary) X(compare) X(compare_scalar) X(where) X(masked_fill) X(copy) X(fill) X(add_inplace)  \
  X(random_fill) X(randint_fill) X(dropout_forward) X(dropout_backward) X(dropout_rows_forward)           \
  X(gelu_forward) X(gelu_backward) X(silu_forward) X(silu_backward) X(glu_forward) X(glu_backward)        \
  X(sum) X(max) X(max_backward) X(sum_of_squares)                                                         \
  X(matmul)                                                                                               \
  X(softmax_forward) X(softmax_backward) X(layer_norm_forward) X(layer_norm_backward) X(rms_norm_forward) \
  X(rms_norm_backward) X(rope_tables) X(rope) X(embedding_forward) X(embedding_backward)                  \
  X(sinkhorn_forward) X(sinkhorn_backward)                                                                \
  X(scaled_masked_softmax_forward) X(scaled_masked_softmax_backward) X(flash_attention_forward)           \
  X(flash_attention_backward) X(sparse_attention_forward) X(sparse_attention_backward)                   \
  X(find_bad_target) X(cross_entropy_forward) X(cross_entropy_backward) X(count_not_ignored)              \
  X(chunked_lm_loss_forward)                                                                              \
  X(gather) X(scatter_add) X(first_out_of_range) X(index_max) X(topk) X(argsort) X(bincount)              \
  X(adamw_step)
// The composite kernels, in kernels.h's order: they have defaults built from the kernels above, so a
// backend never lacks them; it may replace them with fused ones.
#define TIDAL_COMPOSITE_KERNEL_NAMES(X) \
  X(matmul_bias) X(matmul_many) X(sum_of_squares_many) X(scale_many) X(add_rows_inplace) X(adamw_multi_step)
// clang-format on

// The kernels the backend class K does not define, by name: those it inherits from Kernels, which
// throw. Read from the types, so nothing runs (&K::f names the class that declares f).
template <class K>
std::vector<const char*> missing_kernels() {
  static_assert(std::is_base_of_v<Kernels, K>);
  std::vector<const char*> names;
#define TIDAL_IF_MISSING(f) \
  if (std::is_same_v<decltype(&K::f), decltype(&Kernels::f)>) names.push_back(#f);
  TIDAL_KERNEL_NAMES(TIDAL_IF_MISSING)
#undef TIDAL_IF_MISSING
  return names;
}

namespace detail {
void register_kernels(DeviceType type, Kernels& kernels, std::vector<const char*> missing);
void register_runtime(DeviceType type, DeviceRuntime& runtime);
}  // namespace detail

inline constexpr int kRegisterBackends = 101;  // the first init_priority a program may use

// Registers a backend's kernels (one K, made here and kept until exit) for `type`.
template <class K>
struct RegisterKernels {
  explicit RegisterKernels(DeviceType type) {
    static K kernels;
    detail::register_kernels(type, kernels, missing_kernels<K>());
  }
};

// Registers a backend's runtime (one R, made here and kept until exit) for `type`.
template <class R>
struct RegisterRuntime {
  explicit RegisterRuntime(DeviceType type) {
    static R runtime;
    detail::register_runtime(type, runtime);
  }
};

// The device types whose kernels are registered, and the kernels each one still lacks.
std::vector<DeviceType> registered_device_types();
std::vector<const char*> missing_kernels(DeviceType type);

}  // namespace tidal
