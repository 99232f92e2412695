#include "tidal/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "tidal/base/checked_math.h"
#include "tidal/base/json.h"
#include "tidal/dist/every_rank.h"
#include "tidal/io/atomic_file.h"
#include "tidal/io/safetensors.h"
#include "tidal/io/shown_name.h"
#include "tidal/models/moe.h"
#include "tidal/optim/finite.h"

namespace tidal::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* kTracker = "latest_checkpointed_iteration.txt";

std::string iter_name(int64_t it) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", (long long)it);
  return buf;
}

struct FileSum {
  uint64_t size = 0;
  uint32_t crc = 0;
};

FileSum checksum(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TIDAL_CHECK(f.good(), "[checkpoint] cannot read ", path);
  FileSum s;
  std::vector<char> buf(1 << 20);
  uLong crc = crc32(0L, Z_NULL, 0);
  while (f) {
    f.read(buf.data(), std::streamsize(buf.size()));
    const std::streamsize n = f.gcount();
    if (n <= 0) break;
    crc = crc32(crc, reinterpret_cast<const Bytef*>(buf.data()), uInt(n));
    s.size += uint64_t(n);
  }
  s.crc = uint32_t(crc);
  return s;
}

void write_text(const std::string& path, const std::string& text) {
  io::write_atomically(path, [&](int fd) { io::write_all(fd, text.data(), text.size(), path); });
}

// state.json holds a few settings; a larger one is not ours.
constexpr uintmax_t kMaxStateBytes = 16 << 20;

// A small file of ours (the tracker, state.json), refused unread when it is not a regular file of at
// most `max_bytes`.
std::string read_small(const std::string& path, uintmax_t max_bytes) {
  std::error_code ec;
  TIDAL_CHECK(fs::is_regular_file(path, ec) && fs::file_size(path, ec) <= max_bytes && !ec, "[checkpoint] ", path,
              " is not a regular file of at most ", max_bytes, " bytes: not a checkpoint file of tidal's");
  return io::read_file(path);
}

// obj[key], which must be there.
const json& required(const json& obj, const char* key, const std::string& where) {
  const json* v = json_find(obj, key, where);
  TIDAL_CHECK(v != nullptr, where, " has no field '", key, "'");
  return *v;
}

// obj[key] as an object ({} when absent).
json object_or_empty(const json& obj, const char* key, const std::string& where) {
  const json* v = json_find(obj, key, where);
  if (v == nullptr) return json::object();
  TIDAL_CHECK(v->is_object(), where, " field '", key, "' must be an object, found ", json_kind(*v));
  return *v;
}

// A non-negative integer up to 2^64 - 1 (generator seeds and offsets, file sizes).
uint64_t json_u64(const json& v, const std::string& where) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  const int64_t x = json_int(v, where);
  TIDAL_CHECK(x >= 0, where, " is negative");
  return uint64_t(x);
}

// No checkpoint holds a NaN or an infinity: it would poison every run resumed from it.
void check_finite(const std::map<std::string, Tensor>& tensors, const char* what, int64_t iteration) {
  for (const auto& [name, t] : tensors)
    TIDAL_CHECK(optim::all_finite(t), "[checkpoint] refusing to save iteration ", iteration, ": ", what, " ", name,
                " holds NaN or infinite values (training diverged; --check-for-nan-in-loss-and-grad, on by default, ",
                "stops at the step that does it)");
}

void fsync_dir(const std::string& dir) {
  std::FILE* f = std::fopen(dir.c_str(), "r");
  if (f != nullptr) {
    ::fsync(fileno(f));
    std::fclose(f);
  }
}

// The temporary directory a save of `final_dir` writes into, made afresh.
std::string make_temporary(const std::string& dir, const std::string& final_dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  TIDAL_CHECK(!ec, "[checkpoint] cannot create ", dir, ": ", ec.message());
  const std::string tmp = final_dir + ".tmp-" + std::to_string(::getpid());
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  TIDAL_CHECK(!ec, "[checkpoint] cannot create ", tmp, ": ", ec.message());
  return tmp;
}

// Runs `write` on the temporary directory `tmp`; on any error removes it and throws naming `final_dir`.
void writing(const std::string& tmp, const std::string& final_dir, const std::function<void()>& write) {
  std::error_code ec;
  try {
    write();
  } catch (const fs::filesystem_error& e) {
    fs::remove_all(tmp, ec);
    TIDAL_CHECK(false, "[checkpoint] cannot write ", final_dir, ": ", e.what());
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
}

// Writes a file of tensors: io::save_safetensors, or expert parallel's gathering writer.
using TensorWriter = std::function<void(const std::string& path, const std::map<std::string, Tensor>& tensors,
                                        const std::map<std::string, std::string>& metadata)>;

const TensorWriter kSaveTensors = [](const std::string& path, const std::map<std::string, Tensor>& tensors,
                                     const std::map<std::string, std::string>& metadata) {
  io::save_safetensors(path, tensors, metadata);
};

// Every checkpoint's files but the optimizer's and state.json: their names.
std::vector<std::string> write_model_files(const std::string& tmp, const std::map<std::string, Tensor>& model,
                                           const json& config, const std::string& tokenizer_path,
                                           const TensorWriter& write = kSaveTensors) {
  write(tmp + "/model.safetensors", model, {{"format", "pt"}});
  write_text(tmp + "/config.json", config.dump(2) + "\n");
  std::vector<std::string> files = {"model.safetensors", "config.json"};
  if (!tokenizer_path.empty()) {
    const std::string text = io::read_file(tokenizer_path);
    write_text(tmp + "/tokenizer.json", text);
    files.push_back("tokenizer.json");
  }
  return files;
}

// state.json's record of `files` in `tmp`.
json file_sums(const std::string& tmp, const std::vector<std::string>& files) {
  json out = json::object();
  for (const std::string& f : files) {
    const FileSum sum = checksum(tmp + "/" + f);
    out[f] = {{"size", sum.size}, {"crc32", sum.crc}};
  }
  return out;
}

json state_record(const TrainingState& state, const json& files) {
  json s;
  s["iteration"] = state.iteration;
  s["rng"] = {{"seed", state.rng.seed}, {"offset", state.rng.offset}};
  s["data_position"] = state.data_position;
  s["settings"] = state.settings;
  s["extra"] = state.extra;
  s["files"] = files;
  return s;
}

// Writes state.json into `tmp`, moves `tmp` to `final_dir`, then the tracker to it.
void publish(const std::string& dir, const std::string& tmp, const std::string& final_dir, const json& record,
             int64_t iteration) {
  writing(tmp, final_dir, [&] {
    write_text(tmp + "/state.json", record.dump(2) + "\n");
    fsync_dir(tmp);
    std::error_code ec;
    if (fs::exists(final_dir)) {  // re-saving the same iteration: keep the old one until the new is in place
      const std::string old = final_dir + ".old-" + std::to_string(::getpid());
      fs::rename(final_dir, old);
      fs::rename(tmp, final_dir);
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, final_dir);
    }
    fsync_dir(dir);
  });
  write_text(dir + "/" + kTracker, std::to_string(iteration) + "\n");
}

std::map<std::string, std::string> shard_metadata(const optim::ShardLayout& layout, int rank) {
  return {{"rank", std::to_string(rank)},
          {"ranks", std::to_string(layout.ranks())},
          {"begin", std::to_string(layout.shard_begin(rank))},
          {"end", std::to_string(layout.shard_begin(rank) + layout.shard_size(rank))}};
}

// Checks `path` against state.json's record `info` (field `field`): its size, and with `crc` its CRC-32.
void verify_file(const std::string& path, const json& info, const std::string& field, bool crc) {
  const uint64_t want_size = json_u64(required(info, "size", field + "'"), field + ".size'");
  const int64_t want_crc = json_int(required(info, "crc32", field + "'"), field + ".crc32'");
  TIDAL_CHECK(want_crc >= 0 && want_crc <= int64_t(UINT32_MAX), field, ".crc32' is not a CRC-32");
  TIDAL_CHECK(fs::is_regular_file(path), "[checkpoint] ", path, " is missing");
  if (!crc) {
    std::error_code ec;
    const uintmax_t size = fs::file_size(path, ec);
    TIDAL_CHECK(!ec && size == want_size, "[checkpoint] ", path, " is truncated or was changed: ", size,
                " bytes, the checkpoint recorded ", want_size);
    return;
  }
  const FileSum sum = checksum(path);
  TIDAL_CHECK(sum.size == want_size, "[checkpoint] ", path, " is truncated or was changed: ", sum.size,
              " bytes, the checkpoint recorded ", want_size);
  TIDAL_CHECK(sum.crc == uint32_t(want_crc), "[checkpoint] ", path,
              " is corrupted: its CRC-32 does not match the one recorded when it was saved");
}

// Models of up to 2^45 parameters (35 trillion): beyond that a layout is not ours (and 2^45 times
// kMaxCheckpointRanks stays far from int64's end in make_shard_layout's arithmetic).
constexpr int64_t kMaxElements = int64_t(1) << 45;

// state.json's "optimizer_shards" (ranks 0 when absent: one process's optimizer.safetensors).
OptimizerShards read_shards(const json& s, const std::string& where) {
  OptimizerShards o;
  const json* v = json_find(s, "optimizer_shards", where);
  if (v == nullptr) return o;
  const std::string field = where + " field 'optimizer_shards";
  TIDAL_CHECK(v->is_object(), field, "' must be an object, found ", json_kind(*v));
  const int64_t ranks = json_int(required(*v, "ranks", field + "'"), field + ".ranks'");
  TIDAL_CHECK(ranks >= 1 && ranks <= kMaxCheckpointRanks, field, ".ranks' must be in [1, ", kMaxCheckpointRanks,
              "], got ", ranks);
  o.ranks = int(ranks);
  o.align = json_int(required(*v, "align", field + "'"), field + ".align'");
  TIDAL_CHECK(o.align >= 1 && o.align <= kMaxElements, field, ".align' must be in [1, 2^45], got ", o.align);
  const json& params = required(*v, "parameters", field + "'");
  TIDAL_CHECK(params.is_array() && !params.empty(), field, ".parameters' must be a non-empty array, found ",
              json_kind(params));
  int64_t total = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string at = field + ".parameters[" + std::to_string(i) + "]'";
    const json& p = params[i];
    TIDAL_CHECK(p.is_array() && p.size() == 2, at, " must be [name, numel], found ", json_kind(p));
    const std::string name = json_string(p[0], at + " name");
    const int64_t numel = json_int(p[1], at + " numel");
    TIDAL_CHECK(numel >= 0, at, " numel is negative");
    total = checked_add(total, numel, at);
    TIDAL_CHECK(total <= kMaxElements, field, ".parameters' holds more than 2^45 elements: not a model's");
    o.parameters.emplace_back(name, numel);
  }
  return o;
}

// A piece as a manifest lists it: [name, dtype, whole shape, begin, length].
json manifest(const std::vector<optim::TensorPiece>& pieces) {
  json out = json::array();
  for (const optim::TensorPiece& p : pieces)
    out.push_back({p.name, int(p.data.dtype()), p.shape.vec(), p.begin, p.data.numel()});
  return out;
}

// The order every rank sends its pieces in and rank 0 writes the tensors in: by name.
std::vector<optim::TensorPiece> by_name(std::vector<optim::TensorPiece> pieces) {
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const optim::TensorPiece& a, const optim::TensorPiece& b) { return a.name < b.name; });
  return pieces;
}

void check_finite(const std::vector<optim::TensorPiece>& pieces, const char* what, int64_t iteration) {
  for (const optim::TensorPiece& p : pieces)
    TIDAL_CHECK(optim::all_finite(p.data), "[checkpoint] refusing to save iteration ", iteration, ": ", what, " ",
                p.name, " holds NaN or infinite values (training diverged; --check-for-nan-in-loss-and-grad, on by ",
                "default, stops at the step that does it)");
}

// Rank 0's side of one file of a gathered save (expert parallel): every tensor of one process's file
// assembled from the pieces the ranks' manifests list, rank 0's own copied, the others' received from
// their ranks when the file's writer reaches the tensor, so rank 0 holds one assembled tensor at a
// time. Every rank sends its pieces in name order (at most one per tensor), the writer writes in name
// order, so the messages match in the order listed.
class PieceReceiver {
 public:
  PieceReceiver(dist::Communicator& comm, const std::vector<std::string>& manifests, const char* file,
                const std::vector<optim::TensorPiece>& own)
      : comm_(comm), queue_(manifests.size()), next_(manifests.size(), 0) {
    if (!own.empty()) device_ = own.front().data.device();
    for (const optim::TensorPiece& p : own) add(p.name, p.data.dtype(), p.shape, {0, p.begin, p.data.numel(), &p});
    for (size_t r = 1; r < manifests.size(); ++r) {
      const json listed = json::parse(manifests[r]);
      for (const json& e : listed.at(file)) {
        const std::string name = e[0].get<std::string>();
        const Piece piece{int(r), e[3].get<int64_t>(), e[4].get<int64_t>(), nullptr};
        add(name, DType(e[1].get<int>()), Shape(e[2].get<std::vector<int64_t>>()), piece);
        if (piece.length > 0) queue_[r].push_back({name, DType(e[1].get<int>()), piece.length});
      }
    }
  }
  TensorWriter writer() {
    return [this](const std::string& path, const std::map<std::string, Tensor>& tensors,
                  const std::map<std::string, std::string>& metadata) {
      TIDAL_ASSERT(tensors.empty(), "[checkpoint] a gathered file's tensors are its pieces");
      std::vector<io::TensorEntry> entries;
      for (const auto& [name, w] : tensors_) entries.push_back({name, w.dtype, w.shape});
      io::save_safetensors_streamed(
          path, std::move(entries), [this](const io::TensorEntry& e) { return produce(e); }, metadata);
    };
  }
  // What was not received yet (a failed write): taken and dropped, so no rank waits to send it.
  void drain() {
    for (size_t r = 1; r < queue_.size(); ++r)
      for (; next_[r] < queue_[r].size(); ++next_[r]) {
        const Pending& p = queue_[r][next_[r]];
        Tensor t = empty({p.length}, p.dtype, device_);
        comm_.exchange({}, {{int(r), t.raw_data(), t.nbytes()}});
      }
  }

 private:
  struct Piece {
    int rank;
    int64_t begin, length;
    const optim::TensorPiece* own;  // rank 0's, else null
  };
  struct Whole {
    DType dtype;
    Shape shape;
    std::vector<Piece> pieces;
    bool consistent = true;  // every piece of the same dtype and shape
  };
  struct Pending {
    std::string name;
    DType dtype;
    int64_t length;
  };
  void add(const std::string& name, DType dtype, const Shape& shape, const Piece& piece) {
    auto [it, fresh] = tensors_.try_emplace(name, Whole{dtype, shape, {}});
    if (!fresh && (it->second.dtype != dtype || it->second.shape != shape)) it->second.consistent = false;
    it->second.pieces.push_back(piece);
  }
  Tensor produce(const io::TensorEntry& e) {
    Whole& w = tensors_.at(e.name);
    // The pieces tile the tensor, and the ranks' next pieces to receive are these.
    TIDAL_ASSERT(w.consistent, "[checkpoint] the pieces of ", e.name, " disagree on its dtype or shape");
    std::sort(w.pieces.begin(), w.pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
    int64_t at = 0;
    std::vector<size_t> next = next_;
    for (const Piece& p : w.pieces) {
      TIDAL_ASSERT(p.begin == at, "[checkpoint] the pieces of ", e.name, " leave a gap or overlap at element ", at);
      at += p.length;
      if (p.own == nullptr && p.length > 0)
        TIDAL_ASSERT(next[size_t(p.rank)] < queue_[size_t(p.rank)].size() &&
                         queue_[size_t(p.rank)][next[size_t(p.rank)]++].name == e.name,
                     "[checkpoint] ", e.name, " is not rank ", p.rank, "'s next piece to receive");
    }
    TIDAL_ASSERT(at == w.shape.numel(), "[checkpoint] the pieces of ", e.name, " hold ", at, " of its ",
                 w.shape.numel(), " elements");
    if (w.pieces.size() == 1 && w.pieces[0].own != nullptr && w.pieces[0].own->data.shape() == w.shape)
      return w.pieces[0].own->data;  // one whole tensor of rank 0's
    Tensor t = empty(w.shape, w.dtype, device_);
    Tensor flat = t.view({at});
    const int64_t itemsize = t.itemsize();
    std::vector<dist::Communicator::Transfer> receives;
    for (const Piece& p : w.pieces) {
      if (p.own != nullptr)
        flat.narrow(0, p.begin, p.length).copy_(p.own->data.contiguous().view({p.length}));
      else if (p.length > 0)
        receives.push_back({p.rank, static_cast<char*>(t.raw_data()) + p.begin * itemsize, p.length * itemsize});
    }
    next_ = std::move(next);
    if (!receives.empty()) comm_.exchange({}, receives);
    return t;
  }
  dist::Communicator& comm_;
  std::map<std::string, Whole> tensors_;     // by name
  std::vector<std::vector<Pending>> queue_;  // per rank: its pieces to receive, in order
  std::vector<size_t> next_;                 // per rank: the next of them
  Device device_ = Device::cpu();
};

}  // namespace

int64_t latest_iteration(const std::string& dir) {
  const std::string tracker = dir + "/" + kTracker;
  if (!fs::exists(tracker)) return -1;
  const std::string text = read_small(tracker, 64);
  try {
    size_t used = 0;
    const int64_t it = std::stoll(text, &used);
    if (it >= 0 && text.find_first_not_of(" \n", used) == std::string::npos) return it;
  } catch (const std::exception&) {
  }
  TIDAL_CHECK(false, "[checkpoint] ", tracker, " is corrupted: it should hold an iteration number and nothing else");
  return -1;
}

std::vector<std::string> prepare_save_dir(const std::string& dir) {
  io::create_directories(dir, "--save");
  const std::string probe = dir + "/.tidal-write-probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TIDAL_CHECK(fd >= 0, "--save ", dir, ": cannot write there (", std::strerror(errno), "); give a writable directory");
  ::close(fd);
  ::unlink(probe.c_str());
  // What a save killed before its rename left (save_checkpoint, io::write_atomically): never a
  // checkpoint, since the tracker only ever names a renamed one.
  std::vector<std::string> removed;
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    const bool partial_iter = name.rfind("iter_", 0) == 0 && name.find(".tmp-") != std::string::npos;
    const bool partial_tracker = name.rfind(std::string(kTracker) + ".tmp.", 0) == 0;
    if (!partial_iter && !partial_tracker) continue;
    std::error_code ec;
    fs::remove_all(e.path(), ec);
    TIDAL_CHECK(!ec, "--save ", dir, ": cannot remove ", name, ", left by an interrupted save (", ec.message(), ")");
    removed.push_back(name);
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

optim::ShardLayout OptimizerShards::layout() const {
  std::vector<int64_t> numels;
  for (const auto& [name, numel] : parameters) numels.push_back(numel);
  return optim::make_shard_layout(numels, ranks, align);
}

std::string optimizer_shard_file(int rank, int ranks) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "optimizer.rank%05d-of-%05d.safetensors", rank, ranks);
  return buf;
}

void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const json& config,
                     const std::string& tokenizer_path) {
  check_finite(model, "parameter", state.iteration);
  check_finite(optimizer, "optimizer state", state.iteration);
  const std::string final_dir = dir + "/" + iter_name(state.iteration);
  const std::string tmp = make_temporary(dir, final_dir);
  json record;
  writing(tmp, final_dir, [&] {
    std::vector<std::string> files = write_model_files(tmp, model, config, tokenizer_path);
    io::save_safetensors(tmp + "/optimizer.safetensors", optimizer);
    files.push_back("optimizer.safetensors");
    record = state_record(state, file_sums(tmp, files));
  });
  publish(dir, tmp, final_dir, record, state.iteration);
}

void save_sharded_checkpoint(dist::Communicator& comm, const std::string& dir, const TrainingState& state,
                             const std::map<std::string, Tensor>& model, const OptimizerShards& shards,
                             const std::map<std::string, Tensor>& shard, const json& config,
                             const std::string& tokenizer_path) {
  const int me = comm.rank(), ranks = comm.size();
  TIDAL_ASSERT(shards.ranks == ranks);
  const optim::ShardLayout layout = shards.layout();
  const std::string final_dir = dir + "/" + iter_name(state.iteration);
  const std::string what = "[checkpoint] iteration " + std::to_string(state.iteration) + " was not saved";
  // 1. Nothing that is not finite; rank 0 makes the temporary directory.
  const std::string tmp = dist::on_every_rank(comm, what, [&] {
    check_finite(shard, "optimizer state", state.iteration);
    if (me != 0) return std::string();
    check_finite(model, "parameter", state.iteration);
    return make_temporary(dir, final_dir);
  })[0];
  // 2. Every rank its optimizer shard, rank 0 the model's files too, each fsynced; their sums.
  std::vector<std::string> sums;
  try {
    sums = dist::on_every_rank(comm, what, [&] {
      TIDAL_CHECK(fs::is_directory(tmp), "[checkpoint] ", tmp, ", which rank 0 made, is not visible here: --save ", dir,
                  " must be a directory every rank sees (a shared filesystem)");
      std::vector<std::string> files;
      if (me == 0) files = write_model_files(tmp, model, config, tokenizer_path);
      files.push_back(optimizer_shard_file(me, ranks));
      io::save_safetensors(tmp + "/" + files.back(), shard, shard_metadata(layout, me));
      return file_sums(tmp, files).dump();
    });
  } catch (...) {
    std::error_code ec;
    if (me == 0) fs::remove_all(tmp, ec);
    throw;
  }
  // 3. Rank 0: state.json listing every file, the rename, the tracker. Every rank waits for it.
  dist::on_every_rank(comm, what, [&] {
    if (me != 0) return std::string();
    json files = json::object();
    for (const std::string& text : sums) files.update(json::parse(text));
    json record = state_record(state, files);
    json params = json::array();
    for (const auto& [name, numel] : shards.parameters) params.push_back({name, numel});
    record["optimizer_shards"] = {{"ranks", ranks}, {"align", shards.align}, {"parameters", params}};
    publish(dir, tmp, final_dir, record, state.iteration);
    return std::string();
  });
}

std::vector<optim::TensorPiece> expert_contribution(const std::map<std::string, Tensor>& all, int rank) {
  std::vector<optim::TensorPiece> out;
  for (const auto& [name, t] : all)
    if (rank == 0 || models::is_expert_parameter(name)) out.push_back({name, t.shape(), 0, t});
  return out;
}

void save_gathered_checkpoint(dist::Communicator& comm, const std::string& dir, const TrainingState& state,
                              const std::vector<optim::TensorPiece>& model_pieces,
                              const std::vector<optim::TensorPiece>& optimizer_pieces, const json& config,
                              const std::string& tokenizer_path) {
  const int me = comm.rank();
  const std::vector<optim::TensorPiece> model = by_name(model_pieces), optimizer = by_name(optimizer_pieces);
  const std::string final_dir = dir + "/" + iter_name(state.iteration);
  const std::string what = "[checkpoint] iteration " + std::to_string(state.iteration) + " was not saved";
  // 1. Nothing that is not finite; what every rank sends; rank 0 makes the temporary directory.
  std::string tmp;
  std::vector<std::string> manifests;
  try {
    manifests = dist::on_every_rank(comm, what, [&] {
      check_finite(model, "parameter", state.iteration);
      check_finite(optimizer, "optimizer state", state.iteration);
      if (me == 0) tmp = make_temporary(dir, final_dir);
      return json{{"model", manifest(model)}, {"optimizer", manifest(optimizer)}}.dump();
    });
  } catch (...) {
    std::error_code ec;
    if (!tmp.empty()) fs::remove_all(tmp, ec);
    throw;
  }
  // 2. The other ranks send their pieces, model then optimizer, each in name order; rank 0 writes.
  std::string failure;
  json record;
  if (me != 0) {
    for (const auto* file : {&model, &optimizer})
      for (const optim::TensorPiece& p : *file) {
        const Tensor c = p.data.contiguous();
        if (c.nbytes() > 0) comm.exchange({{0, c.raw_data(), c.nbytes()}}, {});
      }
  } else {
    PieceReceiver model_in(comm, manifests, "model", model), optimizer_in(comm, manifests, "optimizer", optimizer);
    try {
      writing(tmp, final_dir, [&] {
        std::vector<std::string> files = write_model_files(tmp, {}, config, tokenizer_path, model_in.writer());
        optimizer_in.writer()(tmp + "/optimizer.safetensors", {}, {});
        files.push_back("optimizer.safetensors");
        record = state_record(state, file_sums(tmp, files));
      });
    } catch (const std::exception& e) {
      failure = e.what();
      model_in.drain();
      optimizer_in.drain();
    }
  }
  // 3. Rank 0 publishes; every rank learns how it went.
  dist::on_every_rank(comm, what, [&] {
    if (me != 0) return std::string();
    TIDAL_CHECK(failure.empty(), failure);
    publish(dir, tmp, final_dir, record, state.iteration);
    return std::string();
  });
}

void save_expert_parallel_checkpoint(dist::Communicator& experts, const std::string& dir, const TrainingState& state,
                                     const std::map<std::string, Tensor>& model,
                                     const std::map<std::string, Tensor>& optimizer, const json& config,
                                     const std::string& tokenizer_path) {
  save_gathered_checkpoint(experts, dir, state, expert_contribution(model, experts.rank()),
                           expert_contribution(optimizer, experts.rank()), config, tokenizer_path);
}

Checkpoint load_checkpoint(const std::string& dir, const std::function<bool(const std::string&)>& keep) {
  TIDAL_CHECK(fs::is_directory(dir), "[checkpoint] --load ", dir, " is not a directory");
  const int64_t it = latest_iteration(dir);
  TIDAL_CHECK(it >= 0, "[checkpoint] ", dir, " has no ", kTracker, ": no complete checkpoint was saved there");
  Checkpoint c;
  c.path = dir + "/" + iter_name(it);
  TIDAL_CHECK(fs::is_directory(c.path), "[checkpoint] ", dir, "/", kTracker, " names iteration ", it, " but ", c.path,
              " does not exist");
  const std::string state_path = c.path + "/state.json";
  const std::string where = "[checkpoint] " + state_path;
  const json s = parse_json(read_small(state_path, kMaxStateBytes), where);
  c.state.iteration = json_int(required(s, "iteration", where), where + " field 'iteration'");
  const json& rng = required(s, "rng", where);
  c.state.rng.seed = json_u64(required(rng, "seed", where + " field 'rng'"), where + " field 'rng.seed'");
  c.state.rng.offset = json_u64(required(rng, "offset", where + " field 'rng'"), where + " field 'rng.offset'");
  c.state.data_position = json_int(required(s, "data_position", where), where + " field 'data_position'");
  TIDAL_CHECK(c.state.data_position >= 0, where, " field 'data_position' is negative");
  c.state.settings = object_or_empty(s, "settings", where);
  c.state.extra = object_or_empty(s, "extra", where);
  TIDAL_CHECK(c.state.iteration == it, "[checkpoint] ", state_path, " is for iteration ", c.state.iteration,
              " but lives in ", c.path);
  c.shards = read_shards(s, where);
  const json& files = required(s, "files", where);
  TIDAL_CHECK(files.is_object(), where, " field 'files' must be an object, found ", json_kind(files));
  // Only the files a checkpoint has: a name from the file never becomes a path of its choosing.
  std::set<std::string> expected = {"model.safetensors", "config.json"};
  if (c.shards.ranks == 0) expected.insert("optimizer.safetensors");
  for (int r = 0; r < c.shards.ranks; ++r) expected.insert(optimizer_shard_file(r, c.shards.ranks));
  for (const std::string& needed : expected) TIDAL_CHECK(files.contains(needed), where, " lists no ", needed);
  expected.insert("tokenizer.json");
  for (const auto& [name, info] : files.items()) {
    TIDAL_CHECK(expected.count(name), where, " lists a file that is not part of a checkpoint",
                c.shards.ranks > 0 ? " of " + std::to_string(c.shards.ranks) + " optimizer shards" : std::string(),
                ": ", io::shown_name(name));
    // An optimizer shard's CRC-32 is checked by the rank that reads it (load_optimizer_shard).
    const bool shard = name.rfind("optimizer.rank", 0) == 0;
    verify_file(c.path + "/" + name, info, where + " field 'files." + name, !shard);
  }
  c.files = files;
  c.model = io::load_safetensors(c.path + "/model.safetensors", keep).tensors;
  if (c.shards.ranks == 0) c.optimizer = io::load_safetensors(c.path + "/optimizer.safetensors", keep).tensors;
  c.config = parse_json(io::read_file(c.path + "/config.json"), "[checkpoint] " + c.path + "/config.json");
  if (files.contains("tokenizer.json")) c.tokenizer_path = c.path + "/tokenizer.json";
  return c;
}

std::map<std::string, Tensor> load_optimizer_shard(const Checkpoint& c, int rank) {
  TIDAL_ASSERT(rank >= 0 && rank < c.shards.ranks);
  const std::string name = optimizer_shard_file(rank, c.shards.ranks), path = c.path + "/" + name;
  verify_file(path, c.files.at(name), "[checkpoint] " + c.path + "/state.json field 'files." + name, true);
  io::Safetensors st = io::load_safetensors(path);
  for (const auto& [key, value] : shard_metadata(c.shards.layout(), rank)) {
    auto it = st.metadata.find(key);
    TIDAL_CHECK(it != st.metadata.end() && it->second == value, "[checkpoint] ", path,
                " is not the optimizer shard state.json describes: its metadata '", key, "' should be ", value,
                " (was the file copied from another checkpoint?)");
  }
  return std::move(st.tensors);
}

}  // namespace tidal::checkpoint
