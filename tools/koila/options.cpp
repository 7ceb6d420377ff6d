#include "options.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "capi.h"

namespace koila_cli {
namespace {

[[noreturn]] void usage_error(const std::string& message) { throw CliError(message + " (see koila --help)", 2); }

struct DtypeName {
  const char* name;
  koila_dtype dtype;
};
constexpr DtypeName kDtypes[] = {{"float32", KOILA_FLOAT32},   {"float64", KOILA_FLOAT64}, {"float16", KOILA_FLOAT16},
                                 {"bfloat16", KOILA_BFLOAT16}, {"int64", KOILA_INT64},     {"int32", KOILA_INT32},
                                 {"int8", KOILA_INT8},         {"uint8", KOILA_UINT8},     {"bool", KOILA_BOOL}};

// A whole decimal integer > 0 (no sign, no trailing text, no overflow).
bool positive_integer(const std::string& text, int64_t* out) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0' || v <= 0) return false;
  *out = v;
  return true;
}

// The value after an option: "--batch 8" or "--batch=8".
struct Cursor {
  const std::vector<std::string>& args;
  size_t i = 0;
  std::string value(const std::string& option, const std::string& inline_value, bool has_inline) {
    if (has_inline) return inline_value;
    if (i + 1 >= args.size()) usage_error("option " + option + " needs a value");
    return args[++i];
  }
};

}  // namespace

const char* dtype_name(koila_dtype d) {
  for (const DtypeName& n : kDtypes)
    if (n.dtype == d) return n.name;
  return "?";
}

InputSpec parse_input(const std::string& text) {
  InputSpec spec;
  spec.text = text;
  std::string dims = text;
  const size_t colon = text.find(':');
  if (colon != std::string::npos) {
    dims = text.substr(0, colon);
    const std::string name = text.substr(colon + 1);
    bool known = false;
    for (const DtypeName& n : kDtypes)
      if (name == n.name) {
        spec.dtype = n.dtype;
        known = true;
      }
    if (!known)
      usage_error("--input '" + text + "': unknown dtype '" + name +
                  "' (float32, float64, float16, bfloat16, int64, int32, int8, uint8, bool)");
  }
  size_t start = 0;
  for (;;) {
    const size_t x = dims.find('x', start);
    const std::string part = dims.substr(start, x == std::string::npos ? std::string::npos : x - start);
    int64_t size = 0;
    if (!positive_integer(part, &size))
      usage_error("--input '" + text + "': '" + part +
                  "' is not a positive size; a sample's shape is sizes joined by x, as 3x224x224");
    spec.shape.push_back(size);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return spec;
}

uint64_t parse_bytes(const std::string& text) {
  if (text == "auto") return 0;
  struct Unit {
    const char* suffix;
    double factor;
  };
  static const Unit units[] = {{"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0},
                               {"KB", 1e3},     {"MB", 1e6},        {"GB", 1e9},           {"TB", 1e12},
                               {"K", 1024.0},   {"M", 1048576.0},   {"G", 1073741824.0},   {"B", 1.0}};
  size_t digits = 0;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.'))
    ++digits;
  const std::string number = text.substr(0, digits), suffix = text.substr(digits);
  double factor = suffix.empty() ? 1.0 : 0.0;
  for (const Unit& u : units)
    if (suffix == u.suffix) factor = u.factor;
  char* end = nullptr;
  const double value = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  if (factor == 0 || number.empty() || *end != '\0' || !std::isfinite(value) || value <= 0 || value * factor >= 1.8e19)
    usage_error("--budget '" + text + "': expected a size such as 8GiB, 512MiB, 1.5GB or a number of bytes, or auto");
  return static_cast<uint64_t>(value * factor);
}

const char* loss_name(const Options& o) {
  switch (o.loss) {
    case Loss::None: return "none";
    case Loss::CrossEntropy: return "cross_entropy";
    case Loss::Mse: return "mse";
    case Loss::Mean: return "mean";
  }
  return "?";
}

const char* optimizer_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::None: return "none";
    case OptimizerKind::Sgd: return "sgd";
    case OptimizerKind::SgdMomentum: return "sgd-momentum";
    case OptimizerKind::Adam: return "adam";
  }
  return "?";
}

int optimizer_state_copies(OptimizerKind k) {
  return k == OptimizerKind::Adam ? 2 : k == OptimizerKind::SgdMomentum ? 1 : 0;
}

bool parse_options(const std::vector<std::string>& args, Options* out) {
  Options o;
  Cursor c{args};
  bool batch_given = false;
  std::vector<std::string> positional;
  for (; c.i < args.size(); ++c.i) {
    const std::string& a = args[c.i];
    if (a == "-h" || a == "--help") {
      print_usage();
      return false;
    }
    if (a.rfind("--", 0) != 0 || a == "--") {
      if (a.size() > 1 && a[0] == '-') usage_error("unknown option '" + a + "'");
      positional.push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq);
    const bool has_inline = eq != std::string::npos;
    const std::string inline_value = has_inline ? a.substr(eq + 1) : "";
    auto value = [&] { return c.value(name, inline_value, has_inline); };
    if (name == "--json") {
      o.json = true;
    } else if (name == "--verify") {
      o.verify = true;
    } else if (name == "--per-chunk-stats") {
      o.per_chunk_stats = true;
    } else if (name == "--recompute") {
      const std::string v = value();
      if (v == "off")
        o.recompute = KOILA_RECOMPUTE_OFF;
      else if (v == "as-needed")
        o.recompute = KOILA_RECOMPUTE_AS_NEEDED;
      else
        usage_error("--recompute '" + v + "': expected off or as-needed");
    } else if (name == "--input") {
      o.inputs.push_back(parse_input(value()));
    } else if (name == "--batch") {
      const std::string v = value();
      if (!positive_integer(v, &o.batch)) usage_error("--batch '" + v + "': expected a whole number of samples > 0");
      batch_given = true;
    } else if (name == "--device") {
      o.device = value();
      if (o.device.empty()) usage_error("--device: expected cpu, cuda or cuda:N");
    } else if (name == "--mode") {
      const std::string v = value();
      if (v == "forward")
        o.mode = KOILA_MODE_FORWARD;
      else if (v == "training")
        o.mode = KOILA_MODE_TRAINING;
      else
        usage_error("--mode '" + v + "': expected forward or training");
    } else if (name == "--loss") {
      const std::string v = value();
      if (v.rfind("cross_entropy:", 0) == 0) {
        o.loss = Loss::CrossEntropy;
        if (!positive_integer(v.substr(14), &o.classes))
          usage_error("--loss '" + v + "': expected cross_entropy:C with C the number of classes");
      } else if (v == "mse") {
        o.loss = Loss::Mse;
      } else if (v == "mean") {
        o.loss = Loss::Mean;
      } else {
        usage_error("--loss '" + v + "': expected cross_entropy:C, mse or mean");
      }
    } else if (name == "--optimizer") {
      const std::string v = value();
      if (v == "sgd")
        o.optimizer = OptimizerKind::Sgd;
      else if (v == "sgd-momentum")
        o.optimizer = OptimizerKind::SgdMomentum;
      else if (v == "adam")
        o.optimizer = OptimizerKind::Adam;
      else if (v == "none")
        o.optimizer = OptimizerKind::None;
      else
        usage_error("--optimizer '" + v + "': expected sgd, sgd-momentum, adam or none");
    } else if (name == "--budget") {
      o.budget = parse_bytes(value());
    } else if (name == "--svg") {
      o.svg = value();
      if (o.svg.empty()) usage_error("--svg: expected a file name");
    } else {
      usage_error("unknown option '" + a + "'");
    }
  }
  if (positional.empty()) usage_error("missing command: plan or fit");
  o.command = positional[0];
  if (o.command != "plan" && o.command != "fit")
    usage_error("unknown command '" + o.command + "': expected plan or fit");
  if (positional.size() < 2)
    usage_error(
        "missing MODEL.pt (a TorchScript module: torch.jit.script(model).save(path)) or MODEL.pt2 (torch.export.save)");
  if (positional.size() > 2) usage_error("unexpected argument '" + positional[2] + "'");
  o.model = positional[1];
  if (o.inputs.empty())
    usage_error("missing --input: one per argument of the model's forward, as 3x224x224 or 128:int64");
  if (!batch_given) usage_error("missing --batch: the number of samples in a batch");
  if (o.mode == KOILA_MODE_TRAINING && o.loss == Loss::None)
    usage_error("--mode training needs --loss (cross_entropy:C, mse or mean)");
  if (o.mode == KOILA_MODE_FORWARD && o.optimizer != OptimizerKind::None)
    usage_error("--optimizer applies to --mode training");
  if (!o.svg.empty() && o.command != "plan") usage_error("--svg applies to koila plan");
  if (o.verify && o.command != "fit") usage_error("--verify applies to koila fit");
  *out = o;
  return true;
}

void print_usage() {
  std::fputs(
      "usage: koila plan MODEL.pt --input SHAPE[:DTYPE] [--input ...] --batch N [options]\n"
      "       koila fit  MODEL.pt --input SHAPE[:DTYPE] [--input ...] --batch N [options]\n"
      "\n"
      "Asks koila, without running the model, how a batch of a TorchScript model runs under a\n"
      "memory budget.\n"
      "  plan   the plan for a batch of N: chunk size, number of chunks, estimated peak, and\n"
      "         where the memory goes at the peak, each figure with its source\n"
      "  fit    the largest batch that runs unsplit under the budget, and the largest chunk\n"
      "         a batch of N runs in (found from koila's estimates; nothing runs out of memory)\n"
      "\n"
      "options:\n"
      "  --input SHAPE[:DTYPE]  one sample of a forward argument, sizes joined by x (3x224x224);\n"
      "                         DTYPE float32 (default), float64, float16, bfloat16, int64,\n"
      "                         int32, int8, uint8, bool. Repeat for each argument.\n"
      "  --batch N              samples in a batch (dim 0 of every input)\n"
      "  --device DEV           cpu (default), cuda or cuda:N\n"
      "  --mode MODE            forward (default: evaluation, module in eval mode) or training\n"
      "                         (forward and backward from the loss, module in training mode);\n"
      "                         an exported program (.pt2) keeps the mode it was exported in\n"
      "  --loss LOSS            training: cross_entropy:C (C classes), mse or mean\n"
      "  --optimizer OPT        training: sgd, sgd-momentum (1 copy of the parameters) or\n"
      "                         adam (2 copies); its state is held as after its first step\n"
      "  --budget SIZE          bytes koila may use on the device: 8GiB, 512MiB, 1.5GB, a\n"
      "                         number of bytes, or auto (default: free memory less a tenth)\n"
      "  --per-chunk-stats      batch norm in training normalizes each chunk with its own\n"
      "                         statistics (KOILA_BATCH_STATS_PER_CHUNK)\n"
      "  --recompute POLICY     training: as-needed (default: where no chunk fits, free\n"
      "                         activations in the forward and recompute them in the\n"
      "                         backward) or off; fit also finds the largest batch that\n"
      "                         runs unsplit recomputing\n"
      "  --svg FILE             plan: write the memory timeline (live bytes op by op) as SVG\n"
      "  --verify               fit: run the largest unsplit batch once and report its\n"
      "                         measured peak against the budget\n"
      "  --json                 the same report as JSON\n"
      "  -h, --help             this text (see also: man koila)\n",
      stdout);
}

}  // namespace koila_cli
