#include "tidal/dist/collectives.h"

#include <algorithm>
#include <map>
#include <utility>

#include "tidal/base/error.h"
#include "tidal/memory_scope.h"
#include "tidal/range_recorder.h"
#include "tidal/seam/kernels.h"
#include "tidal/stream.h"

namespace tidal::dist {
namespace {

void check_contiguous(const Tensor& t, const char* op, const char* name) {
  TIDAL_CHECK(t.is_contiguous(), "[", op, "] ", name, " must be contiguous, got strides ", t.strides().str());
}

// MPI moves host bytes: a tensor on a device without host memory (cuda) is staged through the host,
// unless the communicator reads device memory (NCCL).
bool staged(const Communicator& comm, const Tensor& t) {
  return !t.is_meta() && !t.device().is_cpu() && !comm.reads_device_memory();
}

// Sum of the `size` blocks of `blocks` (size × n) in rank order into `out` (n).
void sum_blocks_in_rank_order(Tensor out, const Tensor& blocks) {
  out.copy_(blocks.select(0, 0));
  for (int64_t r = 1; r < blocks.size(0); ++r) out.add_(blocks.select(0, r));
}

}  // namespace

void reduce_scatter_sum(Communicator& comm, const Tensor& out, const Tensor& in) {
  profile::Range range(kReductionRange);
  check_contiguous(out, "reduce_scatter", "out");
  check_contiguous(in, "reduce_scatter", "in");
  const int64_t n = out.numel(), size = comm.size();
  TIDAL_CHECK(in.numel() == n * size && in.dtype() == out.dtype() && in.device() == out.device(),
              "[reduce_scatter] in must hold ", size, " x ", n, " elements of ", out.dtype(), ", got ", in.numel(),
              " of ", in.dtype());
  MemoryScope scope(MemoryCategory::temporary);
  Tensor blocks = empty({size, n}, in.dtype(), in.device());  // (ranks, n): every rank's block of mine
  if (staged(comm, in)) {
    const Tensor host_in = in.detach().to(Device::cpu());
    const Tensor host_blocks = empty({size, n}, in.dtype());
    comm.all_to_all(host_in.raw_data(), host_blocks.raw_data(), n * in.itemsize());
    blocks = host_blocks.to(in.device());
  } else if (!in.is_meta()) {
    comm.all_to_all(in.raw_data(), blocks.raw_data(), n * in.itemsize());
  }
  sum_blocks_in_rank_order(out.view({n}), blocks);
}

void all_gather(Communicator& comm, const Tensor& out, const Tensor& in) {
  check_contiguous(out, "all_gather", "out");
  check_contiguous(in, "all_gather", "in");
  const int64_t n = in.numel(), size = comm.size();
  TIDAL_CHECK(out.numel() == n * size && in.dtype() == out.dtype() && in.device() == out.device(),
              "[all_gather] out must hold ", size, " x ", n, " elements of ", in.dtype(), ", got ", out.numel(), " of ",
              out.dtype());
  if (staged(comm, in)) {
    const Tensor host_in = in.detach().to(Device::cpu());
    const Tensor host_out = empty(out.shape(), out.dtype());
    comm.all_gather(host_in.raw_data(), host_out.raw_data(), n * in.itemsize());
    Tensor(out.detach()).copy_(host_out.to(out.device()));
  } else if (!in.is_meta()) {
    comm.all_gather(in.raw_data(), out.raw_data(), n * in.itemsize());
  }
}

void all_reduce_sum(Communicator& comm, const Tensor& t) {
  check_contiguous(t, "all_reduce", "the tensor");
  const int64_t n = t.numel(), size = comm.size();
  if (size == 1 || n == 0) return;
  profile::Range range(kReductionRange);
  const int64_t shard = (n + size - 1) / size;
  MemoryScope scope(MemoryCategory::temporary);
  Tensor flat = t.view({n});  // (n)
  Tensor padded = flat;       // (size · shard)
  if (shard * size != n) {
    padded = zeros({shard * size}, t.dtype(), t.device());
    padded.narrow(0, 0, n).copy_(flat);
  }
  Tensor mine = empty({shard}, t.dtype(), t.device());
  reduce_scatter_sum(comm, mine, padded);
  Tensor gathered = shard * size == n ? flat : padded;
  all_gather(comm, gathered, mine);
  if (!gathered.is_alias_of(flat)) flat.copy_(gathered.narrow(0, 0, n));
}

void broadcast(Communicator& comm, const Tensor& t, int root) {
  check_contiguous(t, "broadcast", "the tensor");
  TIDAL_CHECK(root >= 0 && root < comm.size(), "[broadcast] root ", root, " is not a rank of ", comm.size());
  if (staged(comm, t)) {
    const Tensor host = t.detach().to(Device::cpu());
    comm.broadcast(host.raw_data(), t.nbytes(), root);
    Tensor(t.detach()).copy_(host.to(t.device()));
  } else if (!t.is_meta()) {
    comm.broadcast(t.raw_data(), t.nbytes(), root);
  }
}

void exchange(Communicator& comm, const std::vector<TensorTransfer>& sends,
              const std::vector<TensorTransfer>& receives) {
  for (const auto* list : {&sends, &receives})
    for (const TensorTransfer& t : *list)
      TIDAL_CHECK(t.data.is_contiguous(), "[exchange] a transfer with rank ", t.peer,
                  " must be contiguous, got strides ", t.data.strides().str());
  // Where each staged transfer's bytes sit in its direction's host buffer (-1: not staged). A send
  // view given for several ranks (the same device bytes) is copied to the host once: `copies`.
  std::map<std::pair<const void*, int64_t>, int64_t> send_at;  // (device bytes, size) -> offset
  std::vector<int64_t> at_send(sends.size(), -1), at_recv(receives.size(), -1);
  std::vector<size_t> copies;  // the sends copied to the host
  int64_t send_bytes = 0, recv_bytes = 0;
  for (size_t k = 0; k < sends.size(); ++k) {
    const Tensor& d = sends[k].data;
    if (!staged(comm, d) || d.nbytes() == 0) continue;
    const auto [it, fresh] = send_at.try_emplace({d.raw_data(), d.nbytes()}, send_bytes);
    if (fresh) {
      copies.push_back(k);
      send_bytes += d.nbytes();
    }
    at_send[k] = it->second;
  }
  for (size_t k = 0; k < receives.size(); ++k) {
    const Tensor& d = receives[k].data;
    if (!staged(comm, d) || d.nbytes() == 0) continue;
    at_recv[k] = recv_bytes;
    recv_bytes += d.nbytes();
  }
  MemoryScope scope(MemoryCategory::temporary);
  const Tensor host_send = send_bytes > 0 ? empty({send_bytes}, DType::u8) : Tensor();  // (bytes)
  const Tensor host_recv = recv_bytes > 0 ? empty({recv_bytes}, DType::u8) : Tensor();  // (bytes)
  auto host_bytes = [](const Tensor& host, int64_t at) { return static_cast<char*>(host.raw_data()) + at; };
  for (size_t k : copies) {
    const Tensor& d = sends[k].data;
    device_kernels(d.device()).copy_to_host(current_stream(d.device()), host_bytes(host_send, at_send[k]), d);
  }
  std::vector<Communicator::Transfer> to, from;
  for (size_t k = 0; k < sends.size(); ++k) {
    const Tensor& d = sends[k].data;
    if (!d.is_meta())
      to.push_back({sends[k].peer, at_send[k] >= 0 ? host_bytes(host_send, at_send[k]) : d.raw_data(), d.nbytes()});
  }
  for (size_t k = 0; k < receives.size(); ++k) {
    const Tensor& d = receives[k].data;
    if (!d.is_meta())
      from.push_back(
          {receives[k].peer, at_recv[k] >= 0 ? host_bytes(host_recv, at_recv[k]) : d.raw_data(), d.nbytes()});
  }
  comm.exchange(to, from);
  for (size_t k = 0; k < receives.size(); ++k) {
    const Tensor& d = receives[k].data;
    if (at_recv[k] >= 0)
      device_kernels(d.device()).copy_from_host(current_stream(d.device()), d, host_bytes(host_recv, at_recv[k]));
  }
}

std::string any_rank(Communicator& comm, const std::string& flags) {
  std::string any = flags;
  for (const std::string& theirs : all_gather_strings(comm, flags))
    for (size_t i = 0; i < any.size(); ++i) any[i] = char(any[i] | theirs[i]);
  return any;
}

std::vector<double> all_gather_values(Communicator& comm, double mine) {
  std::vector<double> all(static_cast<size_t>(comm.size()));
  comm.all_gather(&mine, all.data(), sizeof(double));
  return all;
}

double all_reduce_sum(Communicator& comm, double mine) {
  double sum = 0;
  for (double v : all_gather_values(comm, mine)) sum += v;
  return sum;
}

double all_reduce_max(Communicator& comm, double mine) {
  std::vector<double> all = all_gather_values(comm, mine);
  return *std::max_element(all.begin(), all.end());
}

}  // namespace tidal::dist
