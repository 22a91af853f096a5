/// \file
/// Symbolic graphs at run time (issue 35, docs/design/symbolic.md "Symbolic sizes at run time"):
/// binding a graph's shape symbols from a call's inputs, checking the inputs' sizes against their
/// types under those bindings, and the safety net of per-size specialization: a static copy of the
/// graph for one binding, compiled as a static graph and kept per binding.
///
/// The contract of a symbolic graph (what the tracer makes): every symbol is a bare size of some
/// non-constant input (`f32[s0, 768]`), so each call binds every symbol from its inputs' sizes;
/// every other size, stride, offset and symbolic argument is an expression over them.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "graph/graph.h"
#include "sym/shape_env.h"
#include "tracer/trace_session.h"

namespace ember::runtime {

class Executor;
struct ExecutorOptions;

/// Where each symbol of a graph takes its value at a call.
struct SymbolSources {
  /// Per symbol id: (position among the call's inputs, dim).
  std::vector<std::pair<int, int>> source;
  /// Per symbol id: the range its values must lie in (sym::ShapeEnv's).
  std::vector<sym::Range> range;
  /// Per symbol id: its name and source, for messages.
  std::vector<std::string> name;
};

/// The sources of `g`'s symbols: for each, the first bare size `s<i>` of a non-constant input
/// (`input_slots`: the value of each, in call order). Throws Unsupported for a symbol that is no
/// bare size of such an input (not a graph the executor can bind), unless `given` (the caller
/// passes every value: ExecutorOptions::symbols_from_caller); its source is then (-1, -1).
SymbolSources symbol_sources(const graph::Graph& g, const std::vector<graph::ValueId>& input_slots,
                             bool given = false);

/// The value of each symbol (by id) at a call with `inputs`, after checking, cheaply, that every
/// input has its type's rank and sizes under these values and each symbol lies in its range.
/// Throws UserError naming the input otherwise. Requires `inputs.size() == input_slots.size()`
/// and dtypes checked by the caller.
/// `given` (by symbol id): the values the caller passes, taken instead of the inputs' sizes and
/// checked the same way.
std::vector<int64_t> bind_symbols(const graph::Graph& g, const SymbolSources& sources,
                                  const std::vector<graph::ValueId>& input_slots,
                                  const std::vector<at::Tensor>& inputs,
                                  const std::vector<int64_t>* given = nullptr);

/// `values` (by symbol id) as sym::Bindings.
sym::Bindings to_bindings(const std::vector<int64_t>& values);

/// A static copy of `g` for one binding of its symbols: every type's sizes, strides and offset,
/// and every `DimExpr` / `Dims` argument evaluated (the arguments become `int64_t` /
/// `std::vector<int64_t>`, as a static trace writes them); no symbols left. Throws UserError
/// for a symbol without a value.
graph::Graph specialize_graph(const graph::Graph& g, const sym::Bindings& bindings);

/// The per-size programs of a symbolic graph that compile_graph could not compile symbolically:
/// one static Executor per binding of the symbols, made on the first call with that binding.
class Specializations {
 public:
  Specializations(tracer::TracedGraph traced, const ExecutorOptions& options);
  ~Specializations();
  /// The program for the binding `values` (by symbol id), compiled on first need. Thread-safe.
  std::shared_ptr<Executor> get(const std::vector<int64_t>& values) const;
  /// How many bindings were compiled so far (evicted ones included).
  int num_compiled() const;

  /// Most programs kept; the oldest goes first past it.
  static constexpr size_t kMaxPrograms = 32;

 private:
  tracer::TracedGraph traced_;
  std::unique_ptr<ExecutorOptions> options_;
  mutable std::mutex mu_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<Executor>> programs_;
  mutable std::vector<std::vector<int64_t>> order_;  ///< keys of programs_, oldest first
  mutable int compiled_ = 0;
};

}  // namespace ember::runtime
