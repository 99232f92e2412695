// The `tidal` command line. Each subcommand lives in its own file; errors a user can cause are
// printed with what to do, never as a crash.
#include <cstdio>
#include <new>
#include <string>
#include <vector>

#include "tidal/allocator.h"
#include "tidal/base/error.h"
#include "tidal/dist/communicator.h"
#include "tools/tidal/cli.h"
#include "tools/tidal/data_commands.h"

namespace {

void usage(std::FILE* out) {
  std::fprintf(out,
               "usage: tidal <command> [options]\n\n"
               "commands:\n"
               "  train      train a model (Megatron-LM flags); with no options: small-gpt2 on the\n"
               "             built-in corpus; 'tidal train --help' lists the options\n"
               "  generate   continue a prompt with a checkpoint: --load DIR --prompt TEXT\n"
               "  export     a checkpoint as a Hugging Face directory; --merge-lora folds LoRA adapters in\n"
               "  tokenizer  train a byte-level BPE tokenizer on text files, or encode / decode with\n"
               "             a tokenizer.json (GPT-2, Qwen or our own); 'tidal tokenizer help'\n"
               "  prepare    tokenize text files into a Megatron indexed dataset PREFIX.bin/.idx\n"
               "  presets    the built-in model presets (--model NAME)\n"
               "  report     summarize a profile: tidal report DIR (from tidal train --profile DIR)\n"
               "  plan       will a training config fit? tidal plan [train flags] --memory 80GiB\n"
               "  demo       the engine core on its own: a tiny transformer on generated text and what\n"
               "             activation checkpointing saves\n"
               "  info       build and machine facts: BLAS, threads, device memory limit\n"
               "  help       this text\n\n"
               "environment:\n"
               "  TIDAL_DEVICE_MEMORY=8GiB   emulate a device of that size (out of memory past it)\n"
               "  TIDAL_NUM_THREADS=N        kernel threads (default: all cores)\n");
}

int run(const std::string& command, const std::vector<std::string>& args) {
  if (command == "train") return tidal::cli::run_train(args);
  if (command == "generate") return tidal::cli::run_generate(args);
  if (command == "export") return tidal::cli::run_export(args);
  if (command == "prepare") return tidal::cli::run_prepare(args);
  if (command == "tokenizer") return tidal::cli::run_tokenizer(args);
  if (command == "demo") return tidal::cli::run_demo(args);
  if (command == "info") return tidal::cli::run_info(args);
  if (command == "presets") return tidal::cli::run_presets(args);
  if (command == "report") return tidal::cli::run_report(args);
  if (command == "plan") return tidal::cli::run_plan(args);
  if (command == "help" || command == "--help" || command == "-h") {
    usage(stdout);
    return tidal::cli::kOk;
  }
  std::fprintf(stderr, "tidal: unknown command '%s'\n\n", command.c_str());
  usage(stderr);
  return tidal::cli::kUsage;
}

// Prints a failure and returns its exit code. Under mpirun the message names the rank, and the whole
// run ends with this code: the other ranks must not wait for this one in a collective.
int fail(const std::string& command, const std::string& message, int code) {
  std::string where;
  if (tidal::dist::launched_by_mpi_launcher()) {
    tidal::dist::Communicator& world = tidal::dist::world();
    where = "[rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size()) + "] ";
  }
  std::fprintf(stderr, "tidal %s: %s%s\n", command.c_str(), where.c_str(), message.c_str());
  std::fflush(stderr);
  if (tidal::dist::launched_by_mpi_launcher() && tidal::dist::world().size() > 1) tidal::dist::world().abort(code);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::string command = args.empty() ? "help" : args[0];
  if (!args.empty()) args.erase(args.begin());
  int rc = tidal::cli::kOk;
  try {
    rc = run(command, args);
  } catch (const tidal::OutOfMemory& e) {
    return fail(command, e.what(), tidal::cli::kOutOfMemory);
  } catch (const tidal::InternalError& e) {
    return fail(command, e.what(), tidal::cli::kError);
  } catch (const tidal::Error& e) {
    std::string what = e.what();
    if (const std::string prefix = "tidal " + command + ": "; what.rfind(prefix, 0) == 0) what.erase(0, prefix.size());
    return fail(command, "error: " + what + "\n(run 'tidal help' for the commands and options)", tidal::cli::kError);
  } catch (const std::bad_alloc&) {  // host memory: an input or a table larger than this machine holds
    return fail(command,
                "out of host memory: an allocation failed (the inputs, or what is built from them, need more memory "
                "than this machine has; split large input files, or use a machine with more memory)",
                tidal::cli::kOutOfMemory);
  } catch (const std::exception& e) {
    return fail(command, std::string("unexpected error: ") + e.what(), tidal::cli::kError);
  }
  tidal::dist::finalize();
  return rc;
}
