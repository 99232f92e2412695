#pragma once
// The table of saved tensors: while a SavedTensorLog is alive, every tensor an autograd node saves on
// this thread (parameters and other long-lived state excepted: they are not activations) is recorded with its layer,
// module, op, shape, dtype and bytes. snapshot() then says what became of each: kept (its bytes stay on the device
// until backward), recomputed (a checkpoint dropped it), discarded (an output-discarding recompute freed its bytes), or
// the policy of the hooks that packed it (e.g. offloaded). Storages saved several times count their bytes once.
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "tidal/autograd/saved_tensor_record.h"
#include "tidal/tensor.h"

namespace tidal::autograd {

class SavedTensorLog {
 public:
  SavedTensorLog();
  ~SavedTensorLog();
  SavedTensorLog(const SavedTensorLog&) = delete;
  SavedTensorLog& operator=(const SavedTensorLog&) = delete;

  // The records with their policy as of now (take it at the end of the forward pass).
  std::vector<SavedTensorRecord> snapshot() const;

  // Called by SavedTensor (hooks == nullptr for a tensor kept as is).
  static void note(const Tensor& t, const char* hooks_policy);

 private:
  struct Entry {
    SavedTensorRecord record;
    std::weak_ptr<Storage> storage;
    uint64_t storage_id = 0;
    bool hooked = false;
  };
  std::vector<Entry> entries_;
  SavedTensorLog* outer_;
};

// Sum of `bytes` per policy and the records as JSON: [{"layer", "module", "name", "shape", "dtype",
// "bytes", "policy"}].
nlohmann::json saved_tensors_json(const std::vector<SavedTensorRecord>& records);
// A text table with one row per record and totals per layer and policy.
std::string saved_tensors_table(const std::vector<SavedTensorRecord>& records);

}  // namespace tidal::autograd
