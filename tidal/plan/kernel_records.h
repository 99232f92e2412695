#pragma once
// The kernels one training step runs, as the meta device's cost kernels report them
// (backend/meta/cost_kernels.cpp), each tagged with where in the step it ran: its phase, layer,
// module and op. A dry run (dry_run.h) records its steady-state step this way; the cost model
// (cost_model.h) turns the records into time.
#include <cstdint>
#include <string>
#include <vector>

#include "tidal/seam/cost.h"

namespace tidal::plan {

// Where a kernel ran. The phases are the step's ranges (step.cpp: forward, backward, optimizer);
// within them, a checkpoint replay or an output-discarding recompute is `recompute`, and the loss's
// kernels (cross_entropy / chunked_lm_loss and their backward nodes: in chunk mode the LM head's
// GEMMs too) are `loss`; a collective's own reduction kernels (dist/collectives.h kReductionRange,
// which a collective library runs inside the collective) are `collective`, wherever they run. `other`:
// outside the phases (the batch's tokens).
enum class StepPhase : uint8_t { forward, backward, recompute, loss, optimizer, collective, other };
inline constexpr int kNumStepPhases = 7;
const char* step_phase_name(StepPhase p);

struct StepKernel {
  KernelCost cost;
  StepPhase phase = StepPhase::other;
  int layer = -1;      // the decoder layer (-1: outside the layers)
  std::string module;  // the dotted module name ("" outside modules)
  std::string op;      // the innermost op or backward node ("linear", "FlashAttentionBackward", ...)
  int64_t count = 1;   // identical records this one stands for (tidal plan's search merges them)
  // The LM head's and the loss's (memory/chunk_loss.h head_loss: the head's product and its backward
  // LmHeadBackward, the loss and its backward, in either loss mode): all a loss mode changes in a step, so the
  // search times one loss mode from another's run (plan/search.cpp). Their phases are as above.
  bool head = false;
};

// The records with identical costs, phases, layers and `head` merged into one each, with their counts summed
// (a MoE layer's experts run the same kernels under a dry run's even routing), in the order each first
// ran; module and op names dropped. The cost model's prediction is the same (up to the sums' order).
std::vector<StepKernel> merge_identical(std::vector<StepKernel> kernels);

// A step's records as tidal plan's search keeps them: merged, the head's (StepKernel::head) after the others.
std::vector<StepKernel> kept_for_timing(std::vector<StepKernel> kernels);
// `body`'s kept records with the head's replaced by `head`'s (both kept_for_timing's, of runs in two loss modes on
// as many tokens a rank): what a run of body's configuration in head's loss mode keeps, record by record (search.cpp
// Note [A loss mode from another's run]).
std::vector<StepKernel> with_head_of(const std::vector<StepKernel>& body, const std::vector<StepKernel>& head);

// Records the kernels run on the meta device between construction and finish(): installs the cost
// sink and turns the range recorder on (range_recorder.h; the phases and replays are its ranges).
// One at a time, and not while the profiler records.
class KernelRecorder {
 public:
  KernelRecorder();
  ~KernelRecorder();  // removes the sink and stops the range recorder
  KernelRecorder(const KernelRecorder&) = delete;
  KernelRecorder& operator=(const KernelRecorder&) = delete;

  // The records so far, each tagged with its phase; stops recording.
  std::vector<StepKernel> finish();
  // The same as kept_for_timing(finish()) (merged, without names), without the whole list in between: what tidal
  // plan's search keeps of a dry run of a million kernels. finish() or this, once.
  std::vector<StepKernel> finish_kept();

 private:
  // A kernel as recorded: the module's and op's names by address (they outlive the step recorded, whose model
  // is alive until finish()), so that recording allocates nothing but the list.
  struct Raw {
    KernelCost cost;
    const char* module = nullptr;
    const char* op = nullptr;
    int64_t time_ns = 0;
    int layer = -1;
  };
  // Stops recording and hands each record with its phase and whether it is the head's to `each`, in order.
  template <class F>
  void tag(F&& each);
  static size_t& recorded_hint();
  std::vector<Raw> raw_;
  bool active_ = false;
};

}  // namespace tidal::plan
