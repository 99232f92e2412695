#include "tidal/plan/training.h"

#include <exception>
#include <string>

#include "tidal/plan/auto_memory.h"
#include "tidal/plan/oom_advice.h"

namespace tidal::plan {

train::TrainHooks training_hooks() {
  train::TrainHooks h;
  h.choose = [](const train::TrainArgs& args, dist::Communicator& comm, std::FILE* out) {
    return apply_auto_memory(args, comm, out);
  };
  // The triage order with this run's predicted savings (memory_report.md, "What to try next").
  h.advice = [](const train::TrainArgs& args, const models::ModelConfig& model) -> nlohmann::json {
    try {
      return oom_advice(model, triage_settings(args));
    } catch (const std::exception& e) {
      return std::string("(no advice: ") + e.what() + ")";
    }
  };
  // The breakdown at that moment and what to try (oom_advice.h), with the search's choice for the limit.
  h.out_of_memory = [](const OutOfMemory& e, const train::TrainArgs& args, const models::ModelConfig& model) {
    std::string planner;
    try {
      planner = planner_advice(args, e.stats().limit);
    } catch (const std::exception& x) {  // the advice must never hide the error itself
      planner = std::string("(no plan: ") + x.what() + ")\n";
    }
    return out_of_memory_message(e, model, triage_settings(args), planner);
  };
  return h;
}

train::TrainResult run_training(const train::TrainArgs& args, std::FILE* out) {
  return plan::run_training(args, out, dist::world());
}

train::TrainResult run_training(const train::TrainArgs& args, std::FILE* out, dist::Communicator& comm) {
  return train::run_training(args, out, comm, training_hooks());
}

}  // namespace tidal::plan
