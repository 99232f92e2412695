#pragma once
// What a profile says: the memory state after every allocator event, the peak (when, where, what),
// activations per layer and module at the peak, time per op and phase, recompute, and how much of
// each side stream's work overlapped compute. summarize() is what summary.json holds and what
// `tidal report` and memory_report.md print.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/profile/profiler.h"

namespace tidal::profile {

// Allocated bytes per category after each event of `events` (failed requests change nothing),
// replayed from `start` by the events' deltas.
std::vector<CategoryBytes> replay_states(const CategoryBytes& start, const std::vector<MemEvent>& events);

// Index of the device event at which the window's allocated bytes peaked (first one), or -1.
int64_t peak_event(const ProfileData& data);
// Index of the out-of-memory request in the device events, or -1.
int64_t failed_event(const ProfileData& data);
// The step whose span holds time t (the nearest one when none does); -1 without steps.
int64_t step_at(const ProfileData& data, int64_t t);
// The innermost phase (forward / backward / optimizer) running at time t, "" when none.
std::string phase_at(const ProfileData& data, int64_t t);
// Whether a range is a recompute (a checkpoint replay or an output-discarding recompute).
bool is_recompute(const std::string& name);

nlohmann::json summarize(const ProfileData& data);
// The human summary of a summary.json (what `tidal report DIR` prints).
std::string format_summary(const nlohmann::json& summary);
// memory_report.md: the summary plus the full saved-tensor table.
std::string memory_report(const ProfileData& data, const nlohmann::json& summary);

}  // namespace tidal::profile
