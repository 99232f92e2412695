#pragma once
// A file writer's side of a save (save.cpp; not for use outside checkpoint/): every tensor of one
// file assembled from the pieces the ranks' manifests list, the writer's own copied, the others'
// received from their ranks when the writer reaches the tensor, so the writer holds one assembled
// tensor at a time. Every rank sends its pieces of the file in name order (at most one per tensor),
// the writer writes in name order, so the messages match in the order listed.
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tidal/dist/communicator.h"
#include "tidal/optim/shard_state.h"

namespace tidal::checkpoint {

// A manifest lists a rank's pieces of each file: {"FILE": [[name, dtype, whole shape, begin, length], ...]}.
nlohmann::json manifest_of(const std::vector<optim::TensorPiece>& pieces);

class PieceReceiver {
 public:
  // `manifests[r]`: rank r's (every rank's; the writer's own is not read), `own`: the writer's pieces.
  PieceReceiver(dist::Communicator& comm, const std::vector<nlohmann::json>& manifests, const std::string& file,
                const std::vector<optim::TensorPiece>& own);
  // Writes the file at `path` with `metadata`.
  void write(const std::string& path, const std::map<std::string, std::string>& metadata);
  // What was not received yet (a failed write): taken and dropped, so no rank waits to send it.
  void drain();

 private:
  struct Piece {
    int rank;
    int64_t begin, length;
    const optim::TensorPiece* own;  // the writer's, else null
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
  void add(const std::string& name, DType dtype, const Shape& shape, const Piece& piece);
  Tensor produce(const std::string& name);

  dist::Communicator& comm_;
  std::map<std::string, Whole> tensors_;     // by name
  std::vector<std::vector<Pending>> queue_;  // per rank: its pieces to receive, in order
  std::vector<size_t> next_;                 // per rank: the next of them
  Device device_ = Device::cpu();
};

}  // namespace tidal::checkpoint
