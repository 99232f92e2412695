// tidal::Flags, the parser of every `tidal` command: what it accepts and how it explains a mistake.
#include "tidal/base/flags.h"

#include <gtest/gtest.h>

#include "tests/support/error_of.h"

namespace tidal {
namespace {

using testing::error_of;

Flags demo_flags() {
  Flags f("demo");
  f.option("steps", "training steps", "N").option("lr", "learning rate", "LR").flag("checkpoint", "recompute");
  f.multi("input", "files", "FILE");
  return f;
}

TEST(Flags, OptionsSwitchesListsAndInlineValues) {
  Flags f = demo_flags();
  f.parse({"--steps", "3", "--checkpoint", "--lr=-0.5", "--input", "a", "b", "--input", "c"});
  EXPECT_EQ(f.integer("steps", 0, 0, 10), 3);
  EXPECT_TRUE(f.flag_on("checkpoint"));
  EXPECT_EQ(f.number("lr", 0, -1, 1), -0.5);
  EXPECT_EQ(f.strs("input"), (std::vector<std::string>{"a", "b", "c"}));  // a list may repeat
  EXPECT_EQ(f.given(), (std::vector<std::string>{"steps", "checkpoint", "lr", "input"}));
  EXPECT_FALSE(f.help_requested());
  EXPECT_EQ(demo_flags().integer("steps", 7, 0, 10), 7);  // not given: the fallback
}

TEST(Flags, MistakesNameTheFlag) {
  auto parse = [](std::vector<std::string> argv) { return error_of([&] { demo_flags().parse(argv); }); };
  EXPECT_NE(parse({"--stepz", "3"}).find("unknown option '--stepz' (did you mean --steps?)"), std::string::npos);
  EXPECT_NE(parse({"--stepz", "3"}).find("Valid options: --steps, --lr, --checkpoint, --input"), std::string::npos);
  EXPECT_NE(parse({"3"}).find("unexpected argument '3'. Valid options"), std::string::npos);  // no far-fetched guess
  EXPECT_NE(error_of([] { Flags("info").parse({"--all"}); }).find("unknown option '--all': it takes no options"),
            std::string::npos);
  EXPECT_NE(parse({"--steps"}).find("--steps needs a value (N)"), std::string::npos);
  EXPECT_NE(parse({"--input", "--steps", "1"}).find("--input needs at least one value"), std::string::npos);
  EXPECT_NE(parse({"--steps", "1", "--steps", "2"}).find("--steps is given twice"), std::string::npos);
  EXPECT_NE(parse({"--checkpoint=yes"}).find("--checkpoint takes no value"), std::string::npos);
  Flags f = demo_flags();
  f.parse({"--steps", "many", "--lr", "2"});
  EXPECT_NE(error_of([&] { f.integer("steps", 0, 0, 10); }).find("--steps must be an integer, got 'many'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { f.number("lr", 0, 0, 1); }).find("--lr must be in [0, 1], got 2"), std::string::npos);
}

TEST(Flags, HelpListsEveryOption) {
  Flags f = demo_flags();
  f.parse({"--steps", "3", "-h"});
  EXPECT_TRUE(f.help_requested());
  const std::string usage = f.usage("[options]");
  EXPECT_EQ(usage.rfind("usage: tidal demo [options]\n\n", 0), 0u) << usage;
  EXPECT_NE(usage.find("  --steps N"), std::string::npos) << usage;
  EXPECT_NE(usage.find("  --input FILE..."), std::string::npos) << usage;
  EXPECT_NE(usage.find("  --checkpoint "), std::string::npos) << usage;
}

}  // namespace
}  // namespace tidal
