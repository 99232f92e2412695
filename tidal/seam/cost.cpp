// The cost sink (cost.h): the meta device's cost kernels report to it.
#include "tidal/seam/cost.h"

#include <utility>

namespace tidal {
namespace {

CostSink& sink() {
  static CostSink* s = new CostSink();  // never destroyed: a dry run may end during exit
  return *s;
}

}  // namespace

const char* cost_kind_name(CostKind k) {
  switch (k) {
    case CostKind::gemm: return "gemm";
    case CostKind::attention: return "attention";
    case CostKind::memory: return "memory";
    case CostKind::optimizer: return "optimizer";
    case CostKind::copy: return "copy";
    case CostKind::host_transfer: return "host_transfer";
  }
  return "?";
}

void set_cost_sink(CostSink s) { sink() = std::move(s); }
bool cost_sink_installed() { return static_cast<bool>(sink()); }

void report_cost(const KernelCost& cost) {
  if (sink()) sink()(cost);
}

}  // namespace tidal
