#include "api/tensor_handle.h"

#include <string>

#include "base/error.h"

namespace koila {

koila_tensor* new_handle(NodePtr node) { return new koila_tensor{std::move(node)}; }

const NodePtr& node_of(const koila_tensor* t, const char* what) {
  if (t == nullptr) fail(Code::InvalidArgument, std::string("argument '") + what + "' is NULL");
  if (!t->node) fail(Code::InvalidArgument, std::string("argument '") + what + "' is not a valid tensor");
  return t->node;
}

NodePtr optional_node(const koila_tensor* t) { return t ? node_of(t, "optional tensor") : nullptr; }

}  // namespace koila
