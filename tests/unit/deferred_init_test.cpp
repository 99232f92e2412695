// Deferred init (nn/deferred_init.h): a model built without its values holds no parameter bytes, and
// materializing each parameter later gives bit for bit the values building it directly gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "tidal/allocator.h"
#include "tidal/models/causal_lm.h"
#include "tidal/nn/deferred_init.h"
#include "tidal/rng.h"

namespace tidal::nn {
namespace {

TEST(DeferredInit, MaterializesExactlyWhatBuildingMakes) {
  for (const char* preset : {"tiny-gpt2", "tiny-qwen3", "tiny-qwen3-moe"}) {
    SCOPED_TRACE(preset);
    const models::ModelConfig config = models::preset(preset);
    manual_seed(7);
    const auto direct = models::create_model(config);
    const RngState after_direct = get_rng_state();

    Allocator& device = device_allocator(Device::cpu());
    const int64_t before = device.stats()[MemoryCategory::parameter].allocated;
    device.reset_peak_stats();
    manual_seed(7);
    Init init;
    init.deferred = std::make_shared<DeferredInit>();
    const auto deferred = models::create_model(config, init);
    EXPECT_EQ(get_rng_state(), after_direct);  // the same generator positions reserved
    // No parameter keeps bytes; building held one parameter's at most.
    EXPECT_EQ(device.stats()[MemoryCategory::parameter].allocated, before);
    int64_t largest = 0;
    for (const auto& [name, p] : direct->named_parameters()) largest = std::max(largest, p.nbytes());
    EXPECT_LE(device.stats()[MemoryCategory::parameter].peak - before, largest);

    const auto want = direct->named_parameters(), got = deferred->named_parameters();
    ASSERT_EQ(want.size(), got.size());
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_FALSE(got[i].second.storage()->is_materialized()) << got[i].first;
      init.deferred->materialize(got[i].second);
      ASSERT_EQ(std::memcmp(got[i].second.raw_data(), want[i].second.raw_data(), size_t(want[i].second.nbytes())), 0)
          << got[i].first;
    }
  }
}

}  // namespace
}  // namespace tidal::nn
