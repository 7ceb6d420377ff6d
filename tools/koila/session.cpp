#include "session.h"

namespace koila_cli {
namespace {

uint64_t bytes_of(const std::vector<int64_t>& shape, koila_dtype dtype) {
  uint64_t n = element_size(dtype);
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::vector<int64_t> shape_of(const koila_tensor* t) {
  size_t ndim = 0;
  check(koila_tensor_shape(t, nullptr, 0, &ndim), "koila_tensor_shape");
  std::vector<int64_t> dims(ndim);
  check(koila_tensor_shape(t, dims.data(), dims.size(), &ndim), "koila_tensor_shape");
  return dims;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool is_floating(koila_dtype d) {
  return d == KOILA_FLOAT32 || d == KOILA_FLOAT64 || d == KOILA_FLOAT16 || d == KOILA_BFLOAT16;
}

// Integers in [0, high) from a fixed pseudo-random sequence, as `dtype`'s bytes: samples
// that differ (koila's probe of a module needs samples that differ to see that it keeps
// them apart), valid as indices of any table of `high` rows or more.
std::vector<unsigned char> integer_data(uint64_t numel, koila_dtype dtype, uint64_t high) {
  const size_t size = element_size(dtype);
  std::vector<unsigned char> bytes(numel * size);
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (uint64_t i = 0; i < numel; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t v = (state >> 33) % high;
    for (size_t b = 0; b < size; ++b) bytes[i * size + b] = static_cast<unsigned char>(v >> (8 * b));  // little-endian
  }
  return bytes;
}

// An input of the batch on the device, wrapped lazy with batch dim 0: standard normal
// samples for floating dtypes, integers in [0, high) otherwise.
Tensor lazy_input(const std::vector<int64_t>& shape, koila_dtype dtype, uint64_t high, const std::string& device,
                  std::vector<Tensor>& keep, const std::string& what) {
  koila_tensor* raw = nullptr;
  if (is_floating(dtype)) {
    check(koila_tensor_randn(&raw, shape.data(), shape.size(), dtype, device.c_str()), what);
  } else {
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= static_cast<uint64_t>(d);
    const std::vector<unsigned char> data = integer_data(numel, dtype, dtype == KOILA_BOOL ? 2 : high);
    check(koila_tensor_from_data(&raw, data.data(), data.size(), dtype, shape.data(), shape.size(), device.c_str()),
          what);
  }
  keep.emplace_back(raw);
  koila_tensor* lazy = nullptr;
  check(koila_lazy(&lazy, raw, 0), what);
  return Tensor(lazy);
}

}  // namespace

Session::Session(const Options& options) : o_(options) {
  uint64_t resolved = 0;
  check(koila_memory_budget(o_.device.c_str(), &resolved), "device '" + o_.device + "'");
  check(koila_set_memory_budget(o_.device.c_str(), o_.budget), "--budget");
  if (o_.per_chunk_stats) check(koila_set_batch_stats(KOILA_BATCH_STATS_PER_CHUNK), "--per-chunk-stats");
  check(koila_set_recompute(o_.recompute), "--recompute");
  const uint64_t before = in_use();
  koila_module* m = nullptr;
  check(koila_module_load(&m, o_.model.c_str(), o_.device.c_str()), "cannot load the model");
  module_.reset(m);
  module_bytes_ = in_use() > before ? in_use() - before : 0;
  const bool training = o_.mode == KOILA_MODE_TRAINING;
  koila_module_kind kind = KOILA_MODULE_TORCHSCRIPT;
  check(koila_module_kind_of(m, &kind), "koila_module_kind_of");
  exported_ = kind == KOILA_MODULE_EXPORTED;
  // An exported program's mode was fixed at export (batch norm and dropout take it as a
  // constant): it runs in that mode, for the forward and for training alike.
  if (!exported_) check(koila_module_train(m, training ? 1 : 0), "koila_module_train");
  int module_training = 0;
  check(koila_module_is_training(m, &module_training), "koila_module_is_training");
  module_training_ = module_training != 0;
  check(koila_module_num_parameters(m, &num_params_), "koila_module_num_parameters");
  for (size_t i = 0; i < num_params_; ++i) {
    koila_tensor* raw = nullptr;
    check(koila_module_parameter(&raw, m, i), "koila_module_parameter");
    Tensor p(raw);
    koila_dtype dtype;
    check(koila_tensor_dtype(p.get(), &dtype), "koila_tensor_dtype");
    const std::vector<int64_t> shape = shape_of(p.get());
    param_bytes_ += bytes_of(shape, dtype);
    if (!training || !is_floating(dtype)) continue;
    check(koila_tensor_set_requires_grad(p.get(), 1), "koila_tensor_set_requires_grad");
    for (int copy = 0; copy < optimizer_state_copies(o_.optimizer); ++copy) {
      koila_tensor* state = nullptr;
      check(koila_tensor_zeros(&state, shape.data(), shape.size(), dtype, o_.device.c_str()), "optimizer state");
      optimizer_state_.emplace_back(state);
      optimizer_bytes_ += bytes_of(shape, dtype);
    }
  }
}

uint64_t Session::in_use() const {
  uint64_t current = 0;
  check(koila_memory_stats(o_.device.c_str(), &current, nullptr), "koila_memory_stats");
  return current;
}

uint64_t Session::budget() const {
  uint64_t b = 0;
  check(koila_memory_budget(o_.device.c_str(), &b), "koila_memory_budget");
  return b;
}

uint64_t Session::input_bytes(int64_t n) const {
  uint64_t total = 0;
  for (const InputSpec& in : o_.inputs) {
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), in.shape.begin(), in.shape.end());
    total += bytes_of(shape, in.dtype);
  }
  if (o_.loss == Loss::CrossEntropy) total += bytes_of({n}, KOILA_INT64);
  return total;  // an MSE target, shaped like the output, is added when it is made
}

Tensor Session::make_loss(koila_tensor* output, BatchPlan& b) {
  koila_tensor* loss = nullptr;
  switch (o_.loss) {
    case Loss::None: return nullptr;
    case Loss::CrossEntropy: {
      if (b.output_shape.size() < 2 || b.output_shape[1] != o_.classes)
        throw CliError("--loss cross_entropy:" + std::to_string(o_.classes) + ": the model's output is " +
                       shape_text(b.output_shape) + ", not [batch, " + std::to_string(o_.classes) + ", ...]");
      std::vector<int64_t> shape = b.output_shape;
      shape.erase(shape.begin() + 1);
      Tensor target =
          lazy_input(shape, KOILA_INT64, static_cast<uint64_t>(o_.classes), o_.device, b.keep, "the loss's target");
      check(koila_cross_entropy(&loss, output, target.get(), KOILA_REDUCTION_MEAN), "--loss cross_entropy");
      b.keep.push_back(std::move(target));
      break;
    }
    case Loss::Mse: {
      koila_dtype dtype;
      check(koila_tensor_dtype(output, &dtype), "koila_tensor_dtype");
      Tensor target = lazy_input(b.output_shape, dtype, 2, o_.device, b.keep, "the loss's target");
      b.input_bytes += bytes_of(b.output_shape, dtype);
      check(koila_mse_loss(&loss, output, target.get(), KOILA_REDUCTION_MEAN), "--loss mse");
      b.keep.push_back(std::move(target));
      break;
    }
    case Loss::Mean: check(koila_mean(&loss, output, nullptr, 0, 0), "--loss mean"); break;
  }
  return Tensor(loss);
}

BatchPlan Session::plan_batch(int64_t n) { return plan_batch(n, o_.recompute); }

BatchPlan Session::plan_batch(int64_t n, koila_recompute recompute) {
  BatchPlan b;
  b.batch = n;
  b.input_bytes = input_bytes(n);
  std::vector<koila_tensor*> args;
  for (const InputSpec& in : o_.inputs) {
    std::vector<int64_t> shape{n};
    shape.insert(shape.end(), in.shape.begin(), in.shape.end());
    Tensor x = lazy_input(shape, in.dtype, 2, o_.device, b.keep, "--input " + in.text);
    args.push_back(x.get());
    b.keep.push_back(std::move(x));
  }
  koila_tensor* out = nullptr;
  check(koila_module_forward(&out, module_.get(), args.data(), args.size()), "the model does not accept the inputs");
  Tensor output(out);
  b.output_shape = shape_of(output.get());
  Tensor loss = make_loss(output.get(), b);
  b.target = loss ? std::move(loss) : std::move(output);
  if (output) b.keep.push_back(std::move(output));
  koila_plan* plan = nullptr;
  check(koila_set_recompute(recompute), "koila_set_recompute");
  koila_status* s = koila_plan_new(&plan, b.target.get(), o_.mode);
  check(koila_set_recompute(o_.recompute), "koila_set_recompute");
  b.plan.reset(plan);
  if (s) {
    b.code = koila_status_code(s);
    b.message = first_line(koila_status_message(s));
    koila_status_free(s);
    if (b.code == KOILA_ERROR_NOT_SPLITTABLE && b.message.find("KOILA_BATCH_STATS_PER_CHUNK") != std::string::npos)
      b.message += " [koila --per-chunk-stats sets it]";
    if (b.code != KOILA_ERROR_OUT_OF_MEMORY && b.code != KOILA_ERROR_NOT_SPLITTABLE)
      throw CliError("cannot plan a batch of " + std::to_string(n) + ": " + b.message);
  }
  return b;
}

}  // namespace koila_cli
