/// \file
/// What the executor's source files share (executor_run.cpp, executor_matmul.cpp,
/// executor_memory.cpp): not part of the runtime's API.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "graph/graph.h"

namespace ember::runtime {

/// The outputs of a kernel of parameters, and the inputs they were computed from: each input's
/// TensorImpl, version counter (an in-place update, an optimizer's step, bumps it) and data
/// pointer (`p.data = t` keeps the TensorImpl and its version but swaps the storage). The
/// storages are held, so no other tensor can be given their addresses while they are the key.
struct ParameterCache {
  struct Input {
    const void* impl = nullptr;
    uint32_t version = 0;
    const void* data = nullptr;
    bool operator==(const Input&) const = default;
  };
  std::mutex mu;
  std::vector<Input> key;
  std::vector<c10::Storage> held;
  std::vector<at::Tensor> outputs;

  static std::vector<Input> key_of(const std::vector<at::Tensor>& env,
                                   const std::vector<graph::ValueId>& in) {
    std::vector<Input> k;
    for (graph::ValueId v : in) {
      const at::Tensor& t = env[v];
      k.push_back({t.unsafeGetTensorImpl(),
                   t.unsafeGetTensorImpl()->version_counter().current_version(), t.data_ptr()});
    }
    return k;
  }
};

/// Whether `t` has the traced layout: the same sizes, and the same strides in every dim of more
/// than one element (the others never move an address).
bool has_layout(const at::Tensor& t, const std::vector<int64_t>& sizes,
                const std::vector<int64_t>& strides);

/// The bytes a strided layout of elements of `itemsize` bytes spans (0 when a size is 0).
int64_t layout_bytes(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                     int64_t itemsize);

/// Every buffer's offset in a call's arena is a multiple of this (sched::plan_arena).
inline constexpr int64_t kArenaAlignment = 64;

}  // namespace ember::runtime
