#pragma once
// What `tidal plan --memory B` prints from its search (plan/search.h): as text, the given run,
// the Pareto front of device memory against step time with the chosen candidate marked and a one-line
// reason for each, then the flags to add; as JSON (`tidal plan --json`), `given`, `chosen` and
// `candidates` (docs/planning.md lists the fields).
#include <nlohmann/json.hpp>
#include <string>

#include "tidal/plan/search.h"

namespace tidal::plan {

std::string format_plan_search(const PlanSearch& s, const train::TrainArgs& given, const SearchOptions& o);
nlohmann::json plan_search_json(const PlanSearch& s, const SearchOptions& o);

}  // namespace tidal::plan
