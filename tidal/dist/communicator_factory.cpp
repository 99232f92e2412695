#include "tidal/dist/communicator_factory.h"

#include <array>

#include "tidal/base/error.h"

namespace tidal::dist {
namespace {

std::array<CommunicatorFactory, kDistributedBackends>& factories() {
  static std::array<CommunicatorFactory, kDistributedBackends> slots{};  // made on first use: any init order
  return slots;
}

}  // namespace

const char* distributed_backend_name(DistributedBackend b) {
  switch (b) {
    case DistributedBackend::mpi: return "mpi";
    case DistributedBackend::nccl: return "nccl";
  }
  return "?";
}

DistributedBackend parse_distributed_backend(const std::string& name) {
  if (name == "mpi") return DistributedBackend::mpi;
  if (name == "nccl") return DistributedBackend::nccl;
  detail::throw_error(detail::str_cat("tidal train: unknown --distributed-backend '", name,
                                      "': valid are mpi (default) and nccl (GPUs; a CUDA build)"));
}

void register_communicator_factory(DistributedBackend backend, CommunicatorFactory factory) {
  CommunicatorFactory& slot = factories()[size_t(backend)];
  TIDAL_ASSERT(factory != nullptr && slot == nullptr, "[dist] a second communicator factory for ",
               distributed_backend_name(backend));
  slot = factory;
}

bool communicator_available(DistributedBackend backend) {
  return backend == DistributedBackend::mpi || factories()[size_t(backend)] != nullptr;
}

std::unique_ptr<Communicator> make_communicator(DistributedBackend backend, Communicator& host, Device device) {
  TIDAL_ASSERT(backend != DistributedBackend::mpi, "[dist] the mpi backend is the host communicator itself");
  const CommunicatorFactory factory = factories()[size_t(backend)];
  TIDAL_CHECK(factory != nullptr, "--distributed-backend ", distributed_backend_name(backend),
              ": this tidal was built without it (NCCL comes with the CUDA backend: build with -DTIDAL_CUDA=ON; "
              "docs/cuda.md)");
  return factory(host, device);
}

}  // namespace tidal::dist
