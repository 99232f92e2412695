#pragma once
// Work that every rank does on its own (writing its checkpoint shard, reading its pieces of one),
// with one outcome for all: a rank that fails must not leave the others waiting for it in the next
// collective, and every rank must say which rank failed and why.
#include <functional>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"

namespace tidal::dist {

// Every rank of `comm` calls it: runs `work` here (it must call no collective), then gathers the
// outcomes. Returns what `work` returned on every rank, in rank order. When `work` threw on any rank,
// every rank throws one tidal::Error with a line "<what>, on rank R of N: <its message>" per failing
// rank (ranks with the same message share a line: "on ranks 0, 2 of 3"). On one rank the exception
// is rethrown unchanged.
std::vector<std::string> on_every_rank(dist::Communicator& comm, const std::string& what,
                                       const std::function<std::string()>& work);

}  // namespace tidal::dist
