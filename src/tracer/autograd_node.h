/// \file
/// Making an autograd Node, whichever pointer this torch holds them by.
#pragma once

#include <torch/csrc/autograd/function.h>

#include <memory>
#include <type_traits>
#include <utility>

namespace ember::tracer {

/// torch's Node pointer: std::shared_ptr in older releases, c10::intrusive_ptr in newer ones.
using NodePtr = decltype(std::declval<torch::autograd::Edge>().function);

/// A new node of type `T` (a torch::autograd::Node) built from `args`.
template <class T, class... Args>
NodePtr make_node(Args&&... args) {
  if constexpr (std::is_same_v<NodePtr, std::shared_ptr<torch::autograd::Node>>) {
    return std::make_shared<T>(std::forward<Args>(args)...);
  } else {
    return c10::make_intrusive<T>(std::forward<Args>(args)...);
  }
}

}  // namespace ember::tracer
