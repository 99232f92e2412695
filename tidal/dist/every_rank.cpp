#include "tidal/dist/every_rank.h"

#include <exception>
#include <utility>

#include "tidal/base/error.h"

namespace tidal::dist {

std::vector<std::string> on_every_rank(dist::Communicator& comm, const std::string& what,
                                       const std::function<std::string()>& work) {
  if (comm.size() == 1) return {work()};
  std::string mine;
  try {
    const std::string result = work();
    mine.reserve(result.size() + 1);
    mine.push_back('+');
    mine.append(result);
  } catch (const std::exception& e) {
    mine.assign(1, '!');
    mine.append(e.what());
  }
  std::vector<std::string> all = dist::all_gather_strings(comm, mine);
  std::vector<std::pair<std::string, std::vector<int>>> failures;  // message, its ranks
  for (int r = 0; r < comm.size(); ++r) {
    std::string& s = all[size_t(r)];
    const bool failed = s.empty() || s[0] != '+';
    s.erase(0, 1);
    if (!failed) continue;
    auto it = failures.begin();
    while (it != failures.end() && it->first != s) ++it;
    if (it == failures.end()) it = failures.insert(failures.end(), {s, {}});
    it->second.push_back(r);
  }
  if (failures.empty()) return all;
  std::string message;
  for (const auto& [why, ranks] : failures) {
    if (!message.empty()) message += "\n";
    message += what + (ranks.size() == 1 ? ", on rank " : ", on ranks ");
    for (size_t i = 0; i < ranks.size(); ++i) message += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
    message += " of " + std::to_string(comm.size()) + ": " + why;
  }
  throw Error(message);
}

}  // namespace tidal::dist
