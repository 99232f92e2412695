#include "tidal/checkpoint/save.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "tidal/base/error.h"
#include "tidal/checkpoint/files.h"
#include "tidal/checkpoint/piece_receiver.h"
#include "tidal/dist/every_rank.h"
#include "tidal/dist/single_communicator.h"
#include "tidal/io/atomic_file.h"
#include "tidal/optim/finite.h"

namespace tidal::checkpoint {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// No checkpoint holds a NaN or an infinity: it would poison every run resumed from it. Nor a tensor
// without values.
void check_finite(const std::vector<optim::TensorPiece>& pieces, const char* what, int64_t iteration) {
  for (const optim::TensorPiece& p : pieces) {
    TIDAL_CHECK(p.data.defined() && !p.data.is_meta(), "[safetensors] cannot save '", p.name,
                "': ", p.data.defined() ? "a meta tensor has no data" : "undefined tensor");
    TIDAL_CHECK(optim::all_finite(p.data), "[checkpoint] refusing to save iteration ", iteration, ": ", what, " ",
                p.name, " holds NaN or infinite values (training diverged; --check-for-nan-in-loss-and-grad, on by ",
                "default, stops at the step that does it)");
  }
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

// Writes state.json into `tmp`, moves `tmp` to `final_dir`, then the tracker to it.
void publish(const std::string& dir, const std::string& tmp, const std::string& final_dir, const json& record,
             int64_t iteration) {
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
  write_text(dir + "/" + kTracker, std::to_string(iteration) + "\n");
}

// The order every rank sends its pieces in and a writer writes its tensors in: by name.
std::vector<optim::TensorPiece> by_name(std::vector<optim::TensorPiece> pieces) {
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const optim::TensorPiece& a, const optim::TensorPiece& b) { return a.name < b.name; });
  return pieces;
}

// config.json, tokenizer.json and `texts`, written by rank 0 after the model's file: their names.
std::vector<std::string> write_text_files(const std::string& tmp, const json& config, const std::string& tokenizer,
                                          const std::map<std::string, std::string>& texts) {
  write_text(tmp + "/config.json", config.dump(2) + "\n");
  std::vector<std::string> files = {"config.json"};
  for (const auto& [name, text] : texts) {
    write_text(tmp + "/" + name, text);
    files.push_back(name);
  }
  if (!tokenizer.empty()) {
    write_text(tmp + "/tokenizer.json", io::read_file(tokenizer));
    files.push_back("tokenizer.json");
  }
  return files;
}

// Runs `write`, turning what it throws into the message of the save's failure ("" when none).
std::string failure_of(const std::string& final_dir, const std::function<void()>& write) {
  try {
    write();
  } catch (const fs::filesystem_error& e) {
    return detail::str_cat("[checkpoint] cannot write ", final_dir, ": ", e.what());
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

std::vector<optim::TensorPiece> whole_pieces(const std::map<std::string, Tensor>& tensors) {
  std::vector<optim::TensorPiece> out;
  for (const auto& [name, t] : tensors) out.push_back({name, t.shape(), 0, t});
  return out;
}

CheckpointFiles one_process_files(std::vector<optim::TensorPiece> model, std::vector<optim::TensorPiece> optimizer) {
  CheckpointFiles c;
  c.files.push_back({"model.safetensors", 0, {{"format", "pt"}}, std::move(model)});
  c.files.push_back({"optimizer.safetensors", 0, {}, std::move(optimizer)});
  return c;
}

CheckpointFiles sharded_files(std::vector<optim::TensorPiece> model, const std::map<std::string, Tensor>& state,
                              const OptimizerShards& shards, int rank) {
  CheckpointFiles c;
  c.files.push_back({"model.safetensors", 0, {{"format", "pt"}}, std::move(model)});
  const optim::ShardLayout layout = shards.layout();
  for (int r = 0; r < shards.ranks; ++r)
    c.files.push_back({optimizer_shard_file(r, shards.ranks), r, shard_metadata(layout, r),
                       r == rank ? whole_pieces(state) : std::vector<optim::TensorPiece>()});
  c.record["optimizer_shards"] = shards_record(shards);
  return c;
}

void save_checkpoint(dist::Communicator& comm, const std::string& dir, const TrainingState& state,
                     const CheckpointFiles& given, const json& config, const std::string& tokenizer_path) {
  const int me = comm.rank();
  const std::string final_dir = dir + "/" + iter_name(state.iteration);
  const std::string what = "[checkpoint] iteration " + std::to_string(state.iteration) + " was not saved";
  std::vector<FilePieces> files = given.files;
  for (FilePieces& f : files) f.pieces = by_name(std::move(f.pieces));
  // 1. Nothing that is not finite; rank 0 makes the temporary directory; what every rank contributes.
  std::vector<json> manifests;
  std::string tmp;
  try {
    for (const std::string& text : dist::on_every_rank(comm, what, [&] {
           for (size_t i = 0; i < files.size(); ++i)
             check_finite(files[i].pieces, files[i].name.starts_with("optimizer") ? "optimizer state" : "parameter",
                          state.iteration);
           json m = json::object();
           if (me == 0) m["tmp"] = tmp = make_temporary(dir, final_dir);
           for (const FilePieces& f : files)
             if (f.writer != me) m[f.name] = manifest_of(f.pieces);
           return m.dump();
         }))
      manifests.push_back(json::parse(text));
  } catch (...) {
    std::error_code ec;
    if (me == 0 && !tmp.empty()) fs::remove_all(tmp, ec);
    throw;
  }
  tmp = manifests[0]["tmp"].get<std::string>();
  // 2. File by file, in the same order on every rank: its writer receives the others' pieces as it
  // writes; the others send theirs. A failed writer still takes what is sent to it.
  std::string failure;
  json sums = json::object();
  for (size_t i = 0; i < files.size(); ++i) {
    const FilePieces& f = files[i];
    if (f.writer != me) {
      for (const optim::TensorPiece& p : f.pieces) {
        // Sent from host memory (MPI reads the bytes): a device tensor is copied to the host first.
        const Tensor c = p.data.is_meta() ? p.data : p.data.detach().to(Device::cpu()).contiguous();
        if (c.nbytes() > 0) comm.exchange({{f.writer, c.raw_data(), c.nbytes()}}, {});
      }
      continue;
    }
    PieceReceiver in(comm, manifests, f.name, f.pieces);
    if (failure.empty())
      failure = failure_of(final_dir, [&] {
        TIDAL_CHECK(fs::is_directory(tmp), "[checkpoint] ", tmp, ", which rank 0 made, is not visible here: --save ",
                    dir, " must be a directory every rank sees (a shared filesystem)");
        std::vector<std::string> written = {f.name};
        in.write(tmp + "/" + f.name, f.metadata);
        if (i == 0 && me == 0)
          for (const std::string& t : write_text_files(tmp, config, tokenizer_path, given.texts)) written.push_back(t);
        sums.update(file_sums(tmp, written));
      });
    if (!failure.empty()) in.drain();
  }
  // 3. Every rank learns how the others' files went (one exchange more when ranks other than 0 wrote
  // files: their sums); rank 0 lists them in state.json and publishes.
  const bool others_write = std::any_of(files.begin(), files.end(), [](const FilePieces& f) { return f.writer != 0; });
  try {
    std::vector<std::string> written = {sums.dump()};
    if (others_write)
      written = dist::on_every_rank(comm, what, [&] {
        TIDAL_CHECK(failure.empty(), failure);
        return sums.dump();
      });
    dist::on_every_rank(comm, what, [&] {
      TIDAL_CHECK(failure.empty(), failure);
      if (me != 0) return std::string();
      json all = json::object();
      for (const std::string& text : written) all.update(json::parse(text));
      json record = state_record(state, all);
      record.update(given.record);
      const std::string published =
          failure_of(final_dir, [&] { publish(dir, tmp, final_dir, record, state.iteration); });
      TIDAL_CHECK(published.empty(), published);
      return std::string();
    });
  } catch (...) {
    std::error_code ec;
    if (me == 0) fs::remove_all(tmp, ec);
    throw;
  }
}

void save_checkpoint(const std::string& dir, const TrainingState& state, const std::map<std::string, Tensor>& model,
                     const std::map<std::string, Tensor>& optimizer, const json& config,
                     const std::string& tokenizer_path) {
  dist::SingleCommunicator one;
  save_checkpoint(one, dir, state, one_process_files(whole_pieces(model), whole_pieces(optimizer)), config,
                  tokenizer_path);
}

}  // namespace tidal::checkpoint
