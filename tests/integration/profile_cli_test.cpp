// `tidal train --profile`, `tidal report`, the plots in a real browser (headless Chromium), and
// `tidal train` past the device limit: the advice, exit code 3, and checkpoints left intact.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/integration/run_command.h"
#include "tests/support/browser.h"
#include "tidal/io/atomic_file.h"

namespace {

namespace fs = std::filesystem;
using Result = tidal::testing::CommandResult;

const std::string kTidal = "OMP_WAIT_POLICY=passive " TIDAL_BINARY_DIR "/tidal";
const std::string kTiny =
    " --model tiny-gpt2 --mock-data --seq-length 64 --micro-batch-size 4 --no-progress "
    "--eval-interval 0 --sample-tokens 0";

Result run(const std::string& cmd) { return tidal::testing::run_command(cmd); }

std::string fresh_dir(const std::string& name) {
  const std::string d = fs::absolute(::testing::TempDir() + "tidal_profile_cli_" + name).string();
  fs::remove_all(d);
  return d;
}

// One profile of step 2 for the tests below (written once).
const std::string& profile_dir() {
  static const std::string dir = [] {
    const std::string d = fresh_dir("train");
    Result r = run(kTidal + " train" + kTiny + " --train-iters 3 --attention eager --profile " + d);
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_NE(r.output.find("profile of step 2 written to " + d), std::string::npos) << r.output;
    return d;
  }();
  return dir;
}

int svg_height(const std::string& path) {
  const std::string text = tidal::io::read_file(path);
  const size_t at = text.find("height=\"");
  EXPECT_NE(at, std::string::npos) << path;
  return at == std::string::npos ? 500 : std::atoi(text.c_str() + at + 8);
}

// Renders an SVG in Chromium and decodes the screenshot. A missing browser is a failure that says
// what to install (CI installs it with scripts/setup.sh).
tidal::testing::Image render(const std::string& svg, const std::string& name) {
  const std::string chromium = tidal::testing::find_chromium();
  if (chromium.empty()) {
    ADD_FAILURE() << "chromium is not installed: the plots must be checked in a real browser. Install Debian's "
                     "chromium (scripts/setup.sh does) and run again.";
    return {};
  }
  const std::string png = fresh_dir(name) + ".png";
  const std::string err = tidal::testing::render_in_chromium(chromium, svg, png, 1000, svg_height(svg),
                                                             fresh_dir(name + "_chromium_profile"));
  EXPECT_EQ(err, "");
  if (!err.empty()) return {};
  return tidal::testing::decode_png(png);
}

// Chromium's "This page contains the following errors" box (an SVG that is not well-formed XML).
const char* kXmlErrorBox = "#ffdddd";

}  // namespace

TEST(ProfileCli, TrainWritesEveryFileAndReportSummarizesThem) {
  const std::string& dir = profile_dir();
  for (const char* f :
       {"trace.json", "memory_timeline.csv", "memory_report.md", "summary.json", "memory.svg", "timeline.svg"})
    EXPECT_TRUE(fs::exists(dir + "/" + f)) << f;
  const nlohmann::json trace = nlohmann::json::parse(tidal::io::read_file(dir + "/trace.json"));
  EXPECT_GT(trace["traceEvents"].size(), 100u);
  const std::string csv = tidal::io::read_file(dir + "/memory_timeline.csv");
  EXPECT_EQ(csv.rfind("time_us,op,layer,category,delta_bytes,allocated,reserved,", 0), 0u) << csv.substr(0, 200);
  const std::string md = tidal::io::read_file(dir + "/memory_report.md");
  for (const char* s : {"## Breakdown at the peak", "reserved but unallocated (reserved - allocated)", "per module",
                        "## Tensors saved for backward", "| kept |"})
    EXPECT_NE(md.find(s), std::string::npos) << s;

  Result r = run(kTidal + " report " + dir);
  EXPECT_EQ(r.code, 0) << r.output;
  for (const char* s : {"device memory at the peak", "activations at the peak", "time by op", "CrossEntropyBackward",
                        "the table accounts for every byte"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  Result none = run(kTidal + " report " + dir + "/nothing");
  EXPECT_EQ(none.code, 1) << none.output;
  EXPECT_NE(none.output.find("holds no profile"), std::string::npos) << none.output;
  Result flags = run(kTidal + " train --profile-steps 2:3");
  EXPECT_EQ(flags.code, 1);
  EXPECT_NE(flags.output.find("--profile-steps needs --profile DIR"), std::string::npos) << flags.output;
}

TEST(ProfileCli, PlotsRenderInHeadlessChromium) {
  using tidal::testing::count_color;
  const std::string& dir = profile_dir();
  const tidal::testing::Image memory = render(dir + "/memory.svg", "memory");
  ASSERT_GT(memory.width, 0);
  // The stacked areas: parameters, optimizer states and activations fill real area; no XML error.
  EXPECT_GT(count_color(memory, "#4e79a7"), 5000);     // parameter
  EXPECT_GT(count_color(memory, "#76b7b2"), 5000);     // optimizer_state
  EXPECT_GT(count_color(memory, "#e15759"), 2000);     // activation
  EXPECT_GT(count_color(memory, "#fde3cc", 4), 2000);  // the backward phase band
  EXPECT_LT(count_color(memory, kXmlErrorBox, 3), 100);

  const tidal::testing::Image timeline = render(dir + "/timeline.svg", "timeline");
  ASSERT_GT(timeline.width, 0);
  EXPECT_GT(count_color(timeline, "#4e79a7"), 1000);     // matmul / linear ranges
  EXPECT_GT(count_color(timeline, "#dce9f7", 4), 1000);  // the forward phase
  EXPECT_LT(count_color(timeline, kXmlErrorBox, 3), 100);

  // The checks see the difference: an SVG that is not well-formed renders Chromium's error box,
  // and an empty one none of the colors.
  const std::string bad = fresh_dir("bad") + ".svg", blank = fresh_dir("blank") + ".svg";
  std::ofstream(bad) << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"200\"><rect width=\"50\" "
                        "height=\"50\" fill=\"#e15759\"/><path d=\"M1,1 <L 3\"/></svg>\n";
  std::ofstream(blank) << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"400\" height=\"200\"></svg>\n";
  EXPECT_GT(count_color(render(bad, "bad"), kXmlErrorBox, 3), 5000);
  const tidal::testing::Image empty = render(blank, "blank");
  EXPECT_EQ(count_color(empty, "#4e79a7") + count_color(empty, "#e15759"), 0);
}

TEST(ProfileCli, OutOfMemoryStopsWithAdviceExitCode3AndKeepsCheckpoints) {
  const std::string ck = fresh_dir("oom_checkpoints"), prof = fresh_dir("oom_profile");
  Result first = run(kTidal + " train" + kTiny + " --train-iters 2 --save " + ck);
  ASSERT_EQ(first.code, 0) << first.output;
  // 3.5 MiB holds the parameters and AdamW's states (1.7 MiB) but not a step (4.9 MiB): training
  // resumes, then stops in the forward pass of step 3.
  Result r = run("TIDAL_DEVICE_MEMORY=3.5MiB " + kTidal + " train" + kTiny + " --train-iters 4 --load " + ck +
                 " --save " + ck + " --save-interval 1 --profile " + prof + " --profile-steps 3");
  EXPECT_EQ(r.code, 3) << r.output;
  for (const char* s : {"out of memory on cpu", "3.50 MiB limit", "optimizer_state", "reserved but unallocated",
                        "needs about 4.86 MiB", "What to try, in the triage order",
                        "1. chunked loss:", "--loss-compute-mode chunk --loss-chunk-size 64 would save 704.00 KiB",
                        "2. sharding:", "needs several ranks: under mpirun -np 8 with --use-distributed-optimizer",
                        "3. recompute (selective):",
                        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 would save",
                        "5. swap optimizer:", "--swap-optimizer --swap-optimizer-times 16 would save 1.14 MiB",
                        "--micro-batch-size 2 --global-batch-size 4 would save", "already on: fused (flash) attention",
                        "For the fastest configuration that fits 3.50 MiB: rerun with --auto-memory",
                        "Checkpoints already written are intact"})
    EXPECT_NE(r.output.find(s), std::string::npos) << s << "\n" << r.output;
  EXPECT_EQ(r.output.find("What to try: a smaller"), std::string::npos) << r.output;

  // The checkpoint of step 2 is untouched: training resumes from it without a limit.
  EXPECT_EQ(tidal::io::read_file(ck + "/latest_checkpointed_iteration.txt"), "2\n");
  Result resume = run(kTidal + " train" + kTiny + " --train-iters 3 --load " + ck);
  EXPECT_EQ(resume.code, 0) << resume.output;
  EXPECT_NE(resume.output.find("resumed from " + ck + "/iter_0000002 at iteration 2"), std::string::npos)
      << resume.output;

  // The profile of the failing step ends at the failure.
  const std::string md = tidal::io::read_file(prof + "/memory_report.md");
  EXPECT_NE(md.find("## Out of memory"), std::string::npos) << md;
  const nlohmann::json s = nlohmann::json::parse(tidal::io::read_file(prof + "/summary.json"));
  EXPECT_EQ(s["stopped"], "out of memory");
  EXPECT_EQ(s["out_of_memory"]["phase"], "forward");
  EXPECT_GT(s["out_of_memory"]["requested"].get<int64_t>(), 0);
  Result report = run(kTidal + " report " + prof);
  EXPECT_NE(report.output.find("OUT OF MEMORY"), std::string::npos) << report.output;
}
