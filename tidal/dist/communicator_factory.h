#pragma once
// Communicators that a backend provides (NCCL from the CUDA backend), made by name without the rest
// of tidal including a backend header: the backend's .cpp registers a factory at static
// initialization (like seam/registry.h does for kernels), and `--distributed-backend` picks one.
// A build without that backend has no factory, and asking for it is an error that says so.
#include <memory>
#include <string>

#include "tidal/device.h"
#include "tidal/dist/communicator.h"

namespace tidal::dist {

// --distributed-backend (Megatron's name): what moves tensors between the ranks. mpi: MPI for every
// buffer (dist::world() as it is). nccl: NCCL for device memory, bootstrapped over MPI, which still
// carries host buffers (losses, flags, strings).
enum class DistributedBackend { mpi, nccl };
inline constexpr int kDistributedBackends = 2;
const char* distributed_backend_name(DistributedBackend b);
// Throws tidal::Error naming the valid values on anything else.
DistributedBackend parse_distributed_backend(const std::string& name);

// Makes a communicator over the ranks of `host` (same size, same rank order) for tensors on `device`;
// a collective of `host`, over which it bootstraps (the unique id goes out by host.broadcast).
using CommunicatorFactory = std::unique_ptr<Communicator> (*)(Communicator& host, Device device);

// Registers `factory` for `backend` (once per backend; the CUDA backend's nccl_communicator.cpp).
void register_communicator_factory(DistributedBackend backend, CommunicatorFactory factory);
// Whether this build registered a factory for `backend` (mpi: always).
bool communicator_available(DistributedBackend backend);
// The communicator of `backend` over `host`'s ranks (not mpi: that one is `host` itself). Throws
// tidal::Error when this build has no such backend (NCCL: built without -DTIDAL_CUDA).
std::unique_ptr<Communicator> make_communicator(DistributedBackend backend, Communicator& host, Device device);

// A namespace-scope object in a backend's .cpp: `const RegisterCommunicator r(DistributedBackend::nccl, &make);`
struct RegisterCommunicator {
  RegisterCommunicator(DistributedBackend backend, CommunicatorFactory factory) {
    register_communicator_factory(backend, factory);
  }
};

}  // namespace tidal::dist
