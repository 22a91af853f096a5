/// \file
/// EMBER_VERIFY_KERNELS=1: every generated kernel checked against the ATen ops of its nodes, per
/// call (see verify_kernels_enabled in executor.h).
#include <ATen/TensorOperators.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/eq.h>
#include <ATen/ops/isnan.h>
#include <ATen/ops/logical_and.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/ne.h>
#include <ATen/ops/where.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>

#include "runtime/executor.h"
#include "support/error.h"

namespace ember::runtime {

std::vector<at::Tensor> Executor::reference_values(const std::vector<at::Tensor>& inputs) const {
  EMBER_INTERNAL_ASSERT(p_.kernels.empty()) << "the reference program has kernels";
  std::vector<at::Tensor> env(p_.traced.graph.values.size());
  for (size_t i = 0; i < inputs.size(); ++i) env[p_.input_slots[i]] = inputs[i];
  for (const auto& [value, index] : p_.constant_slots) env[value] = p_.traced.constants[index];
  torch::jit::Stack stack;
  for (const Step& step : p_.steps) {
    if (step.view && run_view(step, env)) continue;
    step.call->run(env, stack);
  }
  return env;
}

namespace {

/// Elements of `got` that differ from `want`: integers and bools exactly, floats beyond a
/// tolerance of their dtype (NaN only where NaN is expected).
at::Tensor mismatches(const at::Tensor& got, const at::Tensor& want) {
  if (!at::isFloatingType(want.scalar_type())) return at::ne(got, want);
  const bool half = want.scalar_type() == at::kBFloat16 || want.scalar_type() == at::kHalf;
  const double rtol = half ? 2e-2 : 1e-4, atol = half ? 1e-2 : 1e-5;
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  at::Tensor bad = at::abs(g - w) > atol + rtol * at::abs(w);
  at::Tensor same = at::eq(g, w);  // infinities of one sign
  at::Tensor gn = at::isnan(g), wn = at::isnan(w);
  bad = at::where(at::logical_and(gn, wn), false, at::logical_and(bad, same.logical_not()));
  return at::logical_or(bad, at::ne(gn, wn));
}

}  // namespace

void Executor::check_kernel(const Kernel& k, const std::vector<at::Tensor>& reference) const {
  std::vector<at::Tensor> scratch(reference.size());
  for (graph::ValueId v : k.inputs) {
    if (!reference[v].defined()) return;  // a folded constant the reference never computed
    scratch[v] = reference[v];
  }
  // Outputs in an arena of their own (a symbolic program's kernels get their own memory: no
  // sizes are bound here).
  CallArena arena = take_arena(nullptr);
  if (!run_kernel(k, scratch, arena)) return;  // an out-of-range index: ATen raises instead
  static std::mutex mu;
  static std::set<std::string> printed, printed_sources;
  for (size_t j = 0; j < k.outputs.size(); ++j) {
    const graph::ValueId o = k.outputs[j];
    const at::Tensor& want = reference[o];
    const at::Tensor& got = scratch[o];
    if (!want.defined() || k.allocations[j].unused) continue;  // unused: never written
    std::ostringstream msg;
    if (!got.sizes().equals(want.sizes())) {
      msg << "sizes " << got.sizes() << ", expected " << want.sizes();
    } else if (got.numel() > 0) {
      at::Tensor bad = mismatches(got, want).reshape({-1});
      const int64_t n = bad.sum().item<int64_t>();
      if (n == 0) continue;
      const int64_t i = bad.to(at::kByte).argmax().item<int64_t>();
      const at::Tensor gf = got.reshape({-1}), wf = want.reshape({-1});
      msg << n << " of " << got.numel() << " elements differ; first at flat index " << i << ": got "
          << gf[i].item<double>() << ", expected " << wf[i].item<double>();
    } else {
      continue;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (!printed.insert(k.description + " %" + std::to_string(o)).second) continue;  // once
    std::fprintf(stderr, "[ember verify] %s: output %%%d (%s): %s\n", k.description.c_str(), o,
                 c10::toString(want.scalar_type()), msg.str().c_str());
    if (k.triton && printed_sources.insert(k.triton->kernel().name).second) {
      std::fprintf(stderr, "[ember verify] source of %s:\n%s\n", k.triton->kernel().name.c_str(),
                   k.triton->kernel().source.c_str());
    }
  }
}

}  // namespace ember::runtime
