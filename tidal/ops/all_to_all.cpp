#include "tidal/ops/all_to_all.h"

#include <numeric>

#include "tidal/ops/common.h"
#include "tidal/range_recorder.h"

namespace tidal {
namespace {

using autograd::Node;
using autograd::TensorList;

int64_t total(const std::vector<int64_t>& counts) { return std::accumulate(counts.begin(), counts.end(), int64_t(0)); }

void check_counts(dist::Communicator& comm, const Tensor& x, const std::vector<int64_t>& send,
                  const std::vector<int64_t>& recv) {
  detail::check_defined("all_to_all_rows", x, "the input");
  TIDAL_CHECK(x.dim() >= 1, "[all_to_all_rows] the input must have at least 1 dim, got a scalar");
  TIDAL_CHECK(int64_t(send.size()) == comm.size() && int64_t(recv.size()) == comm.size(), "[all_to_all_rows] ",
              send.size(), " send and ", recv.size(), " receive counts for ", comm.size(), " ranks");
  for (size_t r = 0; r < send.size(); ++r)
    TIDAL_CHECK(send[r] >= 0 && recv[r] >= 0, "[all_to_all_rows] a negative count for rank ", r);
  TIDAL_CHECK(total(send) == x.size(0), "[all_to_all_rows] the send counts add up to ", total(send), " rows, but ",
              x.shape(), " has ", x.size(0));
}

// The exchange without autograd: the result of `recv` rows from `x`'s `send` rows.
Tensor exchange_rows(dist::Communicator& comm, const Tensor& x, const std::vector<int64_t>& send,
                     const std::vector<int64_t>& recv) {
  if (!x.is_meta() && !x.device().is_cpu() && comm.size() > 1 && !comm.reads_device_memory())  // MPI: the host
    return exchange_rows(comm, x.detach().to(Device::cpu()), send, recv).to(x.device());
  Shape shape = x.shape();
  shape[0] = total(recv);
  Tensor out = empty(shape, x.dtype(), x.device());
  const Tensor in = x.detach().contiguous();  // a copy when x is not (on meta too: the same bytes)
  if (x.is_meta()) return out;                // no values to move (as dist/collectives.h)
  const int64_t row = shape[0] > 0 ? out.numel() / shape[0] * out.itemsize() : 0;
  const int64_t in_row = x.size(0) > 0 ? in.numel() / x.size(0) * in.itemsize() : 0;
  std::vector<dist::Communicator::Transfer> sends, receives;
  const int me = comm.rank();
  int64_t at_send = 0, at_recv = 0;
  for (int r = 0; r < comm.size(); ++r) {
    const int64_t s = send[size_t(r)], n = recv[size_t(r)];
    if (r == me) {
      TIDAL_ASSERT(s == n, "[all_to_all_rows] ", s, " rows to this rank itself but ", n, " expected from it");
      if (n > 0) out.narrow(0, at_recv, n).copy_(in.narrow(0, at_send, s));
    } else {
      auto* src = static_cast<char*>(in.raw_data());
      auto* dst = static_cast<char*>(out.raw_data());
      if (s > 0) sends.push_back({r, src + at_send * in_row, s * in_row});
      if (n > 0) receives.push_back({r, dst + at_recv * row, n * row});
    }
    at_send += s;
    at_recv += n;
  }
  {
    profile::Range range("all-to-all exchange", profile::kComm);  // blocking: not compute in a profile
    comm.exchange(sends, receives);
  }
  return out;
}

// The reverse exchange: the gradient of the received rows goes back where they came from.
struct AllToAllRowsBackward : Node {
  dist::Communicator* comm = nullptr;
  std::vector<int64_t> send, recv;  // the forward's
  Shape out_shape;
  DType dtype = DType::f32;
  Device device = Device::cpu();
  const char* name() const override { return "AllToAllRowsBackward"; }
  TensorList apply(TensorList&& g) override {
    // Every rank must exchange, also one whose gradient is zero (undefined).
    const Tensor grad = g[0].defined() ? g[0] : zeros(out_shape, dtype, device);
    return {exchange_rows(*comm, grad, recv, send)};
  }
};

}  // namespace

Tensor all_to_all_rows(dist::Communicator& comm, const Tensor& x, const std::vector<int64_t>& send,
                       const std::vector<int64_t>& recv) {
  OpScope scope("all_to_all_rows");
  check_counts(comm, x, send, recv);
  Tensor out = exchange_rows(comm, x, send, recv);
  if (autograd::needs_grad(x)) {
    auto node = autograd::make_node<AllToAllRowsBackward>({&x});
    node->comm = &comm;
    node->send = send;
    node->recv = recv;
    node->out_shape = out.shape();
    node->dtype = out.dtype();
    node->device = out.device();
    autograd::set_history(out, node);
  }
  return out;
}

}  // namespace tidal
