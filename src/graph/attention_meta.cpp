#include "graph/attention_meta.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <torch/library.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "graph/meta_stack.h"
#include "graph/rnn_meta.h"

namespace koila {
namespace {

using meta_stack::args;
using meta_stack::finish;
using meta_stack::Stack;

// SDPBackend::flash_attention (ATen/native/transformers/sdp_utils_cpp.h), the same on every
// LibTorch 2.x.
constexpr int64_t kFlashAttention = 1;

// The choice and the flash op, found when the attention kernel was registered.
struct AttentionOps {
  c10::OperatorHandle choice;
  c10::OperatorHandle flash;
};
std::optional<AttentionOps>& attention_ops() {
  static std::optional<AttentionOps> ops;
  return ops;
}

// The dtype the CPU's flash kernels accumulate in and keep the logsumexp in.
at::ScalarType accumulation(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16 ? at::kFloat : t; }

// Whether the CPU's composite hands these inputs to the flash op as they are (4-D, as many
// heads in each): anything else it prepares first, which its own composite does here too.
bool plain_heads(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  return q.is_meta() && q.dim() == 4 && k.dim() == 4 && v.dim() == 4 && q.size(1) == k.size(1) &&
         k.size(1) == v.size(1);
}

// scaled_dot_product_attention(query, key, value, attn_mask?, dropout_p, is_causal, *,
// scale?[, enable_gqa]) on meta tensors, autograd's key: see attention_meta.h.
void attention_meta(const c10::OperatorHandle& op, Stack* stack) {
  const size_t n = op.schema().arguments().size();
  const auto& ops = attention_ops();
  auto a = args(stack, n);
  if (ops && simulating_cpu() && plain_heads(a[0].toTensor(), a[1].toTensor(), a[2].toTensor())) {
    Stack choice(a.begin(), a.end());  // the choice takes the attention's own arguments
    ops->choice.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::CPU), &choice);
    if (choice.size() == 1 && choice[0].isInt() && choice[0].toInt() == kFlashAttention) {
      const at::Tensor q = a[0].toTensor();
      c10::IValue mask = a[3];
      if (mask.isTensor() && mask.toTensor().scalar_type() == at::kBool) {
        // As the composite converts it: 0 where attended, -inf elsewhere, in the query's dtype.
        const at::Tensor keep = mask.toTensor();
        const auto options = q.options().device(keep.device());
        mask = at::where(keep, at::scalar_tensor(0.0, options),
                         at::scalar_tensor(-std::numeric_limits<double>::infinity(), options));
      }
      Stack flash{a[0], a[1], a[2], a[4], a[5], mask, a[6]};
      ops->flash.callBoxed(&flash);  // through autograd, which records the flash op
      const at::Tensor out = flash.at(0).toTensor();
      finish(stack, n, {out});
      return;
    }
  }
  // LibTorch's own composite, below this key (its kernel fills the Meta entry).
  op.redispatchBoxed(c10::DispatchKeySet(c10::DispatchKey::Meta), stack);
}

bool same_names(const c10::FunctionSchema& s, const std::vector<std::string>& names) {
  const auto& arguments = s.arguments();
  if (arguments.size() != names.size()) return false;
  for (size_t i = 0; i < names.size(); ++i)
    if (arguments[i].name() != names[i]) return false;
  return true;
}

// The blocks the CPU's flash kernels split the queries and keys into: queries by 256 from 768
// of them, by 64 from 192, else by 32; keys by 512 (or fewer where there are fewer).
int64_t query_block(int64_t queries) {
  return std::min<int64_t>(queries, queries >= 768 ? 256 : queries >= 192 ? 64 : 32);
}
int64_t key_block(int64_t keys) { return std::min<int64_t>(keys, 512); }

// The working memory each of the intra-op threads gets while a flash kernel runs (every thread
// of the pool, whether it gets work or not), allocated and freed inside the kernel: `per_thread`
// elements of the accumulation dtype, and `reduced` of the query's own where it is a reduced
// float (half, bfloat16). At 1024 positions the backward's is 1 MiB a thread: 2 MiB on 2 cores,
// 16 MiB on 16, which the simulation left out (a recomputing transformer ran 2 MiB over its
// estimate).
void hold_thread_blocks(const at::Tensor& q, int64_t per_thread, int64_t reduced) {
  const int64_t threads = at::get_num_threads();
  const at::Tensor accumulated = at::empty({threads, per_thread}, q.options().dtype(accumulation(q.scalar_type())));
  if (accumulation(q.scalar_type()) != q.scalar_type()) {
    const at::Tensor narrow = at::empty({threads, reduced}, q.options());
  }
}

}  // namespace

// _scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal, *,
// attn_mask?, scale?) -> (output, logsumexp)
void flash_attention_for_cpu_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 7);
  const at::Tensor q = a[0].toTensor(), k = a[1].toTensor(), v = a[2].toTensor();
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "scaled_dot_product_attention_flash_attention: Accept only 4 dims inputs shape of {B, H, T, K}");
  const int64_t batch = q.size(0), heads = q.size(1), queries = q.size(2);
  const at::Tensor out = at::empty({batch, heads, queries, v.size(3)}, q.options());
  const at::Tensor logsumexp =
      at::empty({batch, queries, heads}, q.options().dtype(accumulation(q.scalar_type()))).transpose(1, 2);
  // Per thread: a block of scores, its maxima and sums, and a block of the output.
  const int64_t qb = query_block(queries), kb = key_block(k.size(2));
  hold_thread_blocks(q, qb * kb + 2 * qb + qb * q.size(3), qb * kb);
  finish(stack, 7, {out, logsumexp});
}

// _scaled_dot_product_flash_attention_for_cpu_backward(grad_out, query, key, value, out,
// logsumexp, dropout_p, is_causal, *, attn_mask?, scale?) -> (grad_query, grad_key, grad_value)
void flash_attention_for_cpu_backward_meta(const c10::OperatorHandle&, Stack* stack) {
  auto a = args(stack, 10);
  const at::Tensor grad_out = a[0].toTensor(), q = a[1].toTensor(), k = a[2].toTensor(), v = a[3].toTensor();
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
              "scaled_dot_product_attention_flash_attention_backward: Accept only 4 dims inputs shape of {B, H, T, K}");
  // The CPU's kernel reads the gradient of the output laid out as [batch, queries, heads,
  // dim] and copies one laid out otherwise (measured with PyTorch's profiler on 2.14.1: a
  // contiguous, an expanded or a strided one is copied, the transpose of a contiguous
  // [batch, queries, heads, dim], as a model's reshape hands it back, is not).
  at::Tensor copied_grad;  // held while the kernel runs, as the CPU's copy is
  if (!grad_out.transpose(1, 2).is_contiguous()) copied_grad = at::empty(grad_out.sizes(), grad_out.options());
  auto like = [](const at::Tensor& t) {
    return at::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
  };
  const at::Tensor gq = like(q), gk = like(k), gv = like(v);
  // Per thread: a block of the attention weights and one of their gradients.
  const int64_t blocks = 2 * query_block(q.size(2)) * key_block(k.size(2));
  hold_thread_blocks(q, blocks, blocks);
  finish(stack, 10, {gq, gk, gv});
}

void register_attention_meta_kernels() {
  auto& dispatcher = c10::Dispatcher::singleton();
  const auto attention = dispatcher.findSchema({"aten::scaled_dot_product_attention", ""});
  const auto choice = dispatcher.findSchema({"aten::_fused_sdp_choice", ""});
  const auto flash = dispatcher.findSchema({"aten::_scaled_dot_product_flash_attention_for_cpu", ""});
  if (!attention || !choice || !flash) return;  // LibTorch 1.13
  // The arguments as the kernel above reads them; another LibTorch's composite may differ
  // in more than these, and then keeps its own path.
  std::vector<std::string> names = {"query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale"};
  if (attention->schema().arguments().size() == names.size() + 1) names.push_back("enable_gqa");
  if (!same_names(attention->schema(), names) || !same_names(choice->schema(), names)) return;
  if (!same_names(flash->schema(), {"query", "key", "value", "dropout_p", "is_causal", "attn_mask", "scale"})) return;
  if (!choice->hasKernelForDispatchKey(c10::DispatchKey::CPU) ||
      !flash->hasKernelForDispatchKey(c10::DispatchKey::Meta))
    return;
  attention_ops() = AttentionOps{*choice, *flash};
  static torch::Library library(torch::Library::IMPL, "aten", c10::DispatchKey::AutogradMeta, __FILE__, __LINE__);
  library.impl("scaled_dot_product_attention", torch::CppFunction::makeFromBoxedFunction<&attention_meta>());
}

}  // namespace koila
