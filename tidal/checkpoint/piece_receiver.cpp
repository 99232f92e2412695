#include "tidal/checkpoint/piece_receiver.h"

#include <algorithm>

#include "tidal/base/error.h"
#include "tidal/io/safetensors.h"

namespace tidal::checkpoint {

using json = nlohmann::json;

json manifest_of(const std::vector<optim::TensorPiece>& pieces) {
  json out = json::array();
  for (const optim::TensorPiece& p : pieces)
    out.push_back({p.name, int(p.data.dtype()), p.shape.vec(), p.begin, p.data.numel()});
  return out;
}

PieceReceiver::PieceReceiver(dist::Communicator& comm, const std::vector<json>& manifests, const std::string& file,
                             const std::vector<optim::TensorPiece>& own)
    : comm_(comm), queue_(manifests.size()), next_(manifests.size(), 0) {
  // The file is assembled in host memory (a cuda run's pieces are copied over); meta stays meta.
  if (!own.empty() && own.front().data.is_meta()) device_ = Device::meta();
  for (const optim::TensorPiece& p : own)
    add(p.name, p.data.dtype(), p.shape, {comm.rank(), p.begin, p.data.numel(), &p});
  for (size_t r = 0; r < manifests.size(); ++r) {
    if (int(r) == comm.rank()) continue;
    for (const json& e : manifests[r].at(file)) {
      const std::string name = e[0].get<std::string>();
      const Piece piece{int(r), e[3].get<int64_t>(), e[4].get<int64_t>(), nullptr};
      add(name, DType(e[1].get<int>()), Shape(e[2].get<std::vector<int64_t>>()), piece);
      if (piece.length > 0) queue_[r].push_back({name, DType(e[1].get<int>()), piece.length});
    }
  }
}

void PieceReceiver::write(const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::vector<io::TensorEntry> entries;
  for (const auto& [name, w] : tensors_) entries.push_back({name, w.dtype, w.shape});
  io::save_safetensors_streamed(
      path, std::move(entries), [this](const io::TensorEntry& e) { return produce(e.name); }, metadata);
}

void PieceReceiver::drain() {
  for (size_t r = 0; r < queue_.size(); ++r)
    for (; next_[r] < queue_[r].size(); ++next_[r]) {
      const Pending& p = queue_[r][next_[r]];
      Tensor t = empty({p.length}, p.dtype, device_);
      comm_.exchange({}, {{int(r), t.raw_data(), t.nbytes()}});
    }
}

void PieceReceiver::add(const std::string& name, DType dtype, const Shape& shape, const Piece& piece) {
  auto [it, fresh] = tensors_.try_emplace(name, Whole{dtype, shape, {}});
  if (!fresh && (it->second.dtype != dtype || it->second.shape != shape)) it->second.consistent = false;
  it->second.pieces.push_back(piece);
}

Tensor PieceReceiver::produce(const std::string& name) {
  Whole& w = tensors_.at(name);
  // The pieces tile the tensor, and the ranks' next pieces to receive are these.
  TIDAL_ASSERT(w.consistent, "[checkpoint] the pieces of ", name, " disagree on its dtype or shape");
  std::sort(w.pieces.begin(), w.pieces.end(), [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  int64_t at = 0;
  std::vector<size_t> next = next_;
  for (const Piece& p : w.pieces) {
    TIDAL_ASSERT(p.begin == at, "[checkpoint] the pieces of ", name, " leave a gap or overlap at element ", at);
    at += p.length;
    if (p.own == nullptr && p.length > 0)
      TIDAL_ASSERT(next[size_t(p.rank)] < queue_[size_t(p.rank)].size() &&
                       queue_[size_t(p.rank)][next[size_t(p.rank)]++].name == name,
                   "[checkpoint] ", name, " is not rank ", p.rank, "'s next piece to receive");
  }
  TIDAL_ASSERT(at == w.shape.numel(), "[checkpoint] the pieces of ", name, " hold ", at, " of its ", w.shape.numel(),
               " elements");
  if (w.pieces.size() == 1 && w.pieces[0].own != nullptr && w.pieces[0].own->data.shape() == w.shape)
    return w.pieces[0].own->data;  // one whole tensor of the writer's
  Tensor t = empty(w.shape, w.dtype, device_);
  Tensor flat = t.view({at});
  const int64_t itemsize = t.itemsize();
  std::vector<dist::Communicator::Transfer> receives;
  for (const Piece& p : w.pieces) {
    if (p.own != nullptr)
      flat.narrow(0, p.begin, p.length).copy_(p.own->data.detach().to(device_).contiguous().view({p.length}));
    else if (p.length > 0)
      receives.push_back({p.rank, static_cast<char*>(t.raw_data()) + p.begin * itemsize, p.length * itemsize});
  }
  next_ = std::move(next);
  if (!receives.empty()) comm_.exchange({}, receives);
  return t;
}

}  // namespace tidal::checkpoint
