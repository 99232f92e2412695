#pragma once
// `tidal report DIR`'s reading of DIR/summary.json (written by `tidal train --profile DIR`): the fields
// format_summary indexes checked first, then the summary formatted; a document that is not a tidal profile summary
// (a missing field, a field of the wrong kind) is an error naming the file and the field, never the JSON library's
// words.
#include <nlohmann/json.hpp>
#include <string>

namespace tidal::profile {

// The human summary of `summary` (what `tidal report` prints); `path` names the file in errors.
std::string report_of_summary(const nlohmann::json& summary, const std::string& path);

}  // namespace tidal::profile
