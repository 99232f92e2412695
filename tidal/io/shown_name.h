#pragma once
// A name read from a file we did not write (a tensor name, a shard path, a metadata key), for an
// error message: quoted, cut to 64 characters ("...' when longer), control bytes shown as '?'. A
// message may name what the file calls a thing; it must not become a way to print the file.
#include <string>

namespace tidal::io {

std::string shown_name(const std::string& name);

}  // namespace tidal::io
