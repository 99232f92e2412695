#pragma once
// tidal_cuda_tests: each test compares the CUDA backend with the CPU backend on the same inputs. On a
// machine without a usable GPU every test reports itself skipped, with the reason, never passed.
#include <gtest/gtest.h>

#include <string>

namespace tidal::testing {

// Empty when a CUDA device is usable, else why not (CUDA's own words).
std::string cuda_unavailable();

}  // namespace tidal::testing

#define TIDAL_REQUIRE_CUDA()                                                   \
  do {                                                                         \
    const std::string tidal_why_ = ::tidal::testing::cuda_unavailable();       \
    if (!tidal_why_.empty()) GTEST_SKIP() << "no CUDA device: " << tidal_why_; \
  } while (0)
