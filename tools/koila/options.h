// The koila command's arguments: what `koila plan|fit MODEL.pt ...` asks, parsed and checked
// before anything is loaded. Every mistake is a CliError with exit status 2 naming the
// argument and what was expected.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "koila.h"

namespace koila_cli {

struct InputSpec {
  std::vector<int64_t> shape;  // one sample's shape (the batch dim 0 is added in front)
  koila_dtype dtype = KOILA_FLOAT32;
  std::string text;  // as given, for reports
};

enum class Loss { None, CrossEntropy, Mse, Mean };
enum class OptimizerKind { None, Sgd, SgdMomentum, Adam };

struct Options {
  std::string command;  // "plan" or "fit"
  std::string model;
  std::vector<InputSpec> inputs;
  int64_t batch = 0;
  std::string device = "cpu";
  koila_mode mode = KOILA_MODE_FORWARD;
  Loss loss = Loss::None;
  int64_t classes = 0;  // cross_entropy:C
  OptimizerKind optimizer = OptimizerKind::None;
  uint64_t budget = 0;  // bytes; 0: auto
  bool json = false;
  std::string svg;      // plan: where to write the timeline
  bool verify = false;  // fit: run the largest unsplit batch once and measure it
  bool per_chunk_stats = false;
  koila_recompute recompute = KOILA_RECOMPUTE_AS_NEEDED;  // --recompute off|as-needed
};

// argv without the program name. Returns false for --help (usage printed to stdout).
bool parse_options(const std::vector<std::string>& args, Options* out);

void print_usage();

// "3x224x224", "128:int64" (exposed for tests).
InputSpec parse_input(const std::string& text);
// "8GiB", "512MiB", "1.5GB", "1000000"; "auto" gives 0.
uint64_t parse_bytes(const std::string& text);

// Names for reports.
const char* loss_name(const Options& o);
const char* optimizer_name(OptimizerKind k);
const char* dtype_name(koila_dtype d);
// How many copies of the parameters the optimizer keeps (Adam's two moments, SGD's momentum).
int optimizer_state_copies(OptimizerKind k);

}  // namespace koila_cli
