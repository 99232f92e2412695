// The large blocks of a splitting caching allocator (block_segments.h, allocator.h Note [Splitting large blocks]).
#include <gtest/gtest.h>

#include <vector>

#include "tidal/block_segments.h"

namespace tidal {
namespace {

TEST(BlockSegments, SplitsAndMergesWithinASegmentOnly) {
  std::vector<char> region(4096);
  char* const one = region.data();
  char* const two = one + 2048;  // a second segment right after the first: side by side, never merged
  BlockSegments s;
  s.add(one, 2048);
  s.add(two, 2048);
  EXPECT_EQ(s.segments(), 2);
  EXPECT_FALSE(s.whole_free_segment(one));  // live as added
  char* const rest = static_cast<char*>(s.split(one, 512));
  EXPECT_EQ(rest, one + 512);
  EXPECT_TRUE(s.owns(rest));
  EXPECT_FALSE(s.owns(one + 100));  // not a block's start
  s.take(rest);
  char* const tail = static_cast<char*>(s.split(rest, 1024));  // one: [0, 512) [512, 1536) live, [1536, 2048) free
  EXPECT_EQ(tail, one + 1536);
  EXPECT_EQ(s.blocks(), 4);

  // The middle block freed: merged with the free tail only.
  BlockSegments::Freed f = s.free(rest);
  EXPECT_EQ(f.ptr, rest);
  EXPECT_EQ(f.bytes, 1536);
  EXPECT_EQ(f.before, nullptr);
  EXPECT_EQ(f.after, tail);
  EXPECT_EQ(f.after_bytes, 512);
  EXPECT_FALSE(s.whole_free_segment(rest));

  // The second segment, freed whole, is not merged with the first's free end right before it.
  f = s.free(two);
  EXPECT_EQ(f.ptr, two);
  EXPECT_EQ(f.bytes, 2048);
  EXPECT_EQ(f.before, nullptr);
  EXPECT_TRUE(s.whole_free_segment(two));
  EXPECT_EQ(s.remove(two), 2048);

  // The first block freed: the segment is one free block again, and can go back.
  f = s.free(one);
  EXPECT_EQ(f.ptr, one);
  EXPECT_EQ(f.bytes, 2048);
  EXPECT_EQ(f.before, nullptr);
  EXPECT_EQ(f.after, rest);
  EXPECT_EQ(f.after_bytes, 1536);
  EXPECT_TRUE(s.whole_free_segment(one));
  EXPECT_EQ(s.remove(one), 2048);
  EXPECT_EQ(s.segments(), 0);
  EXPECT_EQ(s.blocks(), 0);
}

TEST(BlockSegments, MergesWithTheFreeBlockBefore) {
  std::vector<char> region(3000);
  char* const base = region.data();
  BlockSegments s;
  s.add(base, 3000);
  char* const b = static_cast<char*>(s.split(base, 1000));
  s.take(b);
  char* const c = static_cast<char*>(s.split(b, 1000));
  s.take(c);
  s.free(base);
  const BlockSegments::Freed f = s.free(b);  // between a free block and a live one
  EXPECT_EQ(f.ptr, base);
  EXPECT_EQ(f.bytes, 2000);
  EXPECT_EQ(f.before, base);
  EXPECT_EQ(f.before_bytes, 1000);
  EXPECT_EQ(f.after, nullptr);
  EXPECT_FALSE(s.whole_free_segment(base));
  EXPECT_EQ(s.free(c).bytes, 3000);
  EXPECT_TRUE(s.whole_free_segment(base));
}

}  // namespace
}  // namespace tidal
