#pragma once
// What the dry-run tests compare: an allocator's peaks over a run, less what was live before it (the
// test process's own tensors), and the dry run's figures against them, to the byte.
#include <gtest/gtest.h>

#include <string>

#include "tidal/memory_stats.h"

namespace tidal::testing {

// `after`'s peaks (total, per category, the breakdown at the peak) less what was live `before`.
inline MemoryStats peaks_since(const MemoryStats& before, MemoryStats after) {
  after.peak_allocated -= before.allocated;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    after.category[size_t(c)].peak -= before.category[size_t(c)].allocated;
    after.at_peak[size_t(c)] -= before.category[size_t(c)].allocated;
  }
  return after;
}

// The peak, every category's peak and the breakdown at the peak, equal.
inline void expect_same_peaks(const MemoryStats& dry, const MemoryStats& real, const std::string& what) {
  EXPECT_EQ(dry.peak_allocated, real.peak_allocated) << what;
  for (int c = 0; c < kNumMemoryCategories; ++c) {
    const std::string cat(category_name(MemoryCategory(c)));
    EXPECT_EQ(dry.category[size_t(c)].peak, real.category[size_t(c)].peak) << what << " " << cat;
    EXPECT_EQ(dry.at_peak[size_t(c)], real.at_peak[size_t(c)]) << what << " " << cat;
  }
}

}  // namespace tidal::testing
