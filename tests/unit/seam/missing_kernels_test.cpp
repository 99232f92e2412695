// The kernels each backend still lacks (seam/registry.h): none for the complete ones (cpu, meta); a
// backend being brought up (backend/cuda/) is listed kernel by kernel. A deliberately partial
// backend shows that the list is exact and that a missing kernel fails clearly at run time.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "tidal/base/error.h"
#include "tidal/seam/registry.h"
#include "tidal/stream.h"
#include "tidal/tensor.h"

namespace tidal {
namespace {

std::vector<std::string> strings(const std::vector<const char*>& names) { return {names.begin(), names.end()}; }

std::vector<std::string> all_kernels() {
  std::vector<std::string> names;
#define TIDAL_NAME(f) names.push_back(#f);
  TIDAL_KERNEL_NAMES(TIDAL_NAME)
#undef TIDAL_NAME
  return names;
}

std::vector<std::string> composite_kernels() {
  std::vector<std::string> names;
#define TIDAL_NAME(f) names.push_back(#f);
  TIDAL_COMPOSITE_KERNEL_NAMES(TIDAL_NAME)
#undef TIDAL_NAME
  return names;
}

// A backend brought up as far as a fill, a copy and one layout rule.
class HalfDone final : public Kernels {
 public:
  const char* name() const override { return "test"; }
  std::string describe() const override { return ""; }
  bool matmul_operand_ok(int64_t, int64_t, int64_t, int64_t) const override { return true; }
  void copy(Stream&, const Tensor&, const Tensor&) override { ++copies; }
  void fill(Stream&, const Tensor&, double value) override { filled = value; }
  int copies = 0;
  double filled = 0;
};

class Bare final : public Kernels {
 public:
  const char* name() const override { return "bare"; }
  std::string describe() const override { return ""; }
};

TEST(MissingKernels, CompleteBackendsLackNoneAndOthersAreListed) {
  const std::vector<DeviceType> types = registered_device_types();
  ASSERT_FALSE(types.empty());
  bool cpu = false;
  for (DeviceType type : types) {
    const std::vector<std::string> missing = strings(missing_kernels(type));
    std::ostringstream list;
    for (const std::string& name : missing) list << " " << name;
    std::cout << Device{type, 0} << ": " << missing.size() << " kernels missing" << list.str() << "\n";
    cpu = cpu || type == DeviceType::cpu;
    if (type == DeviceType::cpu || type == DeviceType::meta) {
      EXPECT_TRUE(missing.empty()) << "the " << Device{type, 0} << " backend lacks" << list.str();
    }
  }
  EXPECT_TRUE(cpu) << "the cpu backend did not register itself";
}

TEST(MissingKernels, APartialBackendListsExactlyWhatItLacks) {
  std::vector<std::string> want;
  for (const std::string& name : all_kernels())
    if (name != "matmul_operand_ok" && name != "copy" && name != "fill") want.push_back(name);
  EXPECT_EQ(strings(missing_kernels<HalfDone>()), want);
  EXPECT_EQ(strings(missing_kernels<Bare>()), all_kernels());
}

TEST(MissingKernels, AMissingKernelThrowsNamingTheDeviceAndTheKernel) {
  HalfDone k;
  Tensor t = zeros({2});
  Stream& s = current_stream(t.device());
  k.fill(s, t, 3.0);
  k.copy(s, t, t);
  EXPECT_EQ(k.filled, 3.0);
  EXPECT_EQ(k.copies, 1);
  EXPECT_TRUE(k.matmul_operand_ok(1, 1, 1, 1));
  try {
    k.gelu_forward(s, t, t, false);
    FAIL() << "a kernel the backend does not define ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no test kernel for gelu_forward"), std::string::npos) << e.what();
  }
  EXPECT_THROW(k.norm_row_chunks(4), Error);  // layout rules too
  EXPECT_THROW(k.index_max(s, t, nullptr), Error);
}

// The name lists are every kernel of kernels.h, in its order: each kernel's error names it, and each
// composite kernel (a default from other kernels) throws nothing.
TEST(MissingKernels, TheNameListIsKernelsH) {
  std::ifstream in(std::string(TIDAL_SOURCE_DIR) + "/tidal/seam/kernels.h");
  ASSERT_TRUE(in) << "cannot read tidal/seam/kernels.h";
  std::stringstream text;
  text << in.rdbuf();
  const std::string src = text.str();
  // Each "virtual ... NAME(...) ... { missing("NAME"); }", scanned by hand (<regex> trips GCC 12's
  // -Wmaybe-uninitialized under the sanitizers).
  std::vector<std::string> declared, composites;
  const std::vector<std::string> want_composites = composite_kernels();
  size_t virtuals = 0;
  for (size_t at = src.find("virtual "); at != std::string::npos; at = src.find("virtual ", at + 1)) {
    ++virtuals;
    const size_t paren = src.find('(', at);
    size_t begin = paren;
    while (begin > at && (std::isalnum(static_cast<unsigned char>(src[begin - 1])) || src[begin - 1] == '_')) --begin;
    const std::string method = src.substr(begin, paren - begin);
    const size_t body = src.find_first_of(";{", paren);
    if (src[body] == ';') continue;  // = 0: ~Kernels, name, describe
    const size_t call = src.find("missing(\"", body);
    if (std::find(want_composites.begin(), want_composites.end(), method) != want_composites.end()) {
      // A default built from other kernels: it must not throw (a backend never lacks it).
      EXPECT_GT(call, src.find("\n  }\n", body)) << "the composite kernel " << method << " throws";
      composites.push_back(method);
      continue;
    }
    ASSERT_LT(call, src.find('}', body)) << method << " has a body that does not throw";
    const size_t name_at = call + 9;
    const std::string reported = src.substr(name_at, src.find('"', name_at) - name_at);
    EXPECT_EQ(method, reported) << "the kernel " << method << " reports itself as " << reported;
    declared.push_back(method);
  }
  EXPECT_EQ(declared, all_kernels());
  EXPECT_EQ(composites, want_composites);
  EXPECT_EQ(virtuals, declared.size() + composites.size() + 3)
      << "a virtual method of Kernels that is neither a kernel, a composite kernel nor ~Kernels, name or describe";
}

}  // namespace
}  // namespace tidal
