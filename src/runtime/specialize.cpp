#include "runtime/specialize.h"

#include <sstream>

#include "graph/printer.h"
#include "runtime/executor.h"
#include "support/error.h"
#include "sym/eval.h"

namespace ember::runtime {

SymbolSources symbol_sources(const graph::Graph& g, const std::vector<graph::ValueId>& input_slots,
                             bool given) {
  const std::vector<sym::SymbolInfo>& symbols = g.symbols.symbols();
  SymbolSources s;
  s.source.assign(symbols.size(), {-1, -1});
  for (const sym::SymbolInfo& info : symbols) {
    EMBER_INTERNAL_ASSERT(info.id >= 0 && static_cast<size_t>(info.id) < symbols.size())
        << "symbol " << info.name << " has id " << info.id << " of " << symbols.size();
    s.range.push_back(info.range);
    s.name.push_back(info.source.empty() ? info.name : info.name + " (" + info.source + ")");
  }
  for (size_t i = 0; i < input_slots.size(); ++i) {
    const graph::TensorType& t = g.type(input_slots[i]);
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      if (t.sizes[d].is_constant()) continue;
      std::optional<sym::SymbolId> id = t.sizes[d].expr().as_symbol();
      if (id && s.source[*id].first < 0) {
        s.source[*id] = {static_cast<int>(i), static_cast<int>(d)};
      }
    }
  }
  for (size_t id = 0; id < symbols.size(); ++id) {
    // (A symbol pinned to a constant needs none: its value is the constant.)
    EMBER_UNSUPPORTED(given || s.source[id].first >= 0 || s.range[id].is_constant())
        << "symbol " << s.name[id] << " is no size of an input: the executor cannot bind it";
  }
  return s;
}

std::vector<int64_t> bind_symbols(const graph::Graph& g, const SymbolSources& sources,
                                  const std::vector<graph::ValueId>& input_slots,
                                  const std::vector<at::Tensor>& inputs,
                                  const std::vector<int64_t>* given) {
  std::vector<int64_t> values(sources.source.size());
  for (size_t id = 0; id < values.size(); ++id) {
    if (given != nullptr) {
      EMBER_INTERNAL_ASSERT(given->size() == values.size())
          << given->size() << " symbol values given for " << values.size() << " symbols";
      values[id] = (*given)[id];
      EMBER_CHECK(sources.range[id].contains(values[id]))
          << "symbol " << sources.name[id] << " is " << values[id]
          << ", which the graph was traced for in " << sources.range[id].str();
      continue;
    }
    const auto [i, d] = sources.source[id];
    if (i < 0 && sources.range[id].is_constant()) {  // pinned: the inputs' check compares
      values[id] = sources.range[id].lo;
      continue;
    }
    EMBER_INTERNAL_ASSERT(i >= 0) << "symbol " << sources.name[id] << " has no source";
    const at::Tensor& x = inputs[i];
    const graph::TensorType& t = g.type(input_slots[i]);
    EMBER_CHECK(x.dim() == t.dim()) << "input " << i << " has " << x.dim()
                                    << " dims, but the graph was traced for " << graph::type_str(t);
    values[id] = x.size(d);
    EMBER_CHECK(sources.range[id].contains(values[id]))
        << "input " << i << " has size " << x.sizes() << ": its dim " << d << " is symbol "
        << sources.name[id] << ", which the graph was traced for in " << sources.range[id].str();
  }
  sym::Bindings bindings;  // made only when a size is an expression other than a bare symbol
  for (size_t i = 0; i < inputs.size(); ++i) {
    const graph::TensorType& t = g.type(input_slots[i]);
    const at::Tensor& x = inputs[i];
    EMBER_CHECK(x.dim() == t.dim()) << "input " << i << " has " << x.dim()
                                    << " dims, but the graph was traced for " << graph::type_str(t);
    for (int64_t d = 0; d < x.dim(); ++d) {
      const graph::DimExpr& want = t.sizes[d];
      int64_t v = 0;
      if (want.is_constant()) {
        v = want.constant();
      } else if (std::optional<sym::SymbolId> id = want.expr().as_symbol()) {
        v = values[*id];
      } else {
        if (bindings.empty()) bindings = to_bindings(values);
        v = sym::evaluate(want.expr(), bindings);
      }
      EMBER_CHECK(x.size(d) == v) << "input " << i << " has size " << x.sizes()
                                  << ", but the graph was traced for " << graph::type_str(t) << " ("
                                  << v << " in dim " << d << " with these sizes)";
    }
  }
  return values;
}

sym::Bindings to_bindings(const std::vector<int64_t>& values) {
  sym::Bindings b;
  for (size_t id = 0; id < values.size(); ++id)
    b.emplace(static_cast<sym::SymbolId>(id), values[id]);
  return b;
}

namespace {

graph::DimExpr eval_dim(const graph::DimExpr& d, const sym::Bindings& b) {
  return d.is_constant() ? d : graph::DimExpr(sym::evaluate(d.expr(), b));
}

graph::Dims eval_dims(const graph::Dims& ds, const sym::Bindings& b) {
  graph::Dims out;
  out.reserve(ds.size());
  for (const graph::DimExpr& d : ds) out.push_back(eval_dim(d, b));
  return out;
}

}  // namespace

graph::Graph specialize_graph(const graph::Graph& g, const sym::Bindings& bindings) {
  graph::Graph out = g;
  out.symbols = sym::ShapeEnv();
  for (graph::Value& v : out.values) {
    graph::TensorType& t = v.type;
    t.sizes = eval_dims(t.sizes, bindings);
    t.strides = eval_dims(t.strides, bindings);
    t.storage_offset = eval_dim(t.storage_offset, bindings);
  }
  for (graph::Node& n : out.nodes) {
    for (graph::Arg& a : n.args) {
      if (const auto* d = std::get_if<graph::DimExpr>(&a)) {
        a = sym::evaluate(d->expr(), bindings);
      } else if (const auto* ds = std::get_if<graph::Dims>(&a)) {
        std::vector<int64_t> values;
        values.reserve(ds->size());
        for (const graph::DimExpr& e : *ds) values.push_back(sym::evaluate(e.expr(), bindings));
        a = std::move(values);
      }
    }
  }
  return out;
}

Specializations::Specializations(tracer::TracedGraph traced, const ExecutorOptions& options)
    : traced_(std::move(traced)), options_(std::make_unique<ExecutorOptions>(options)) {}

Specializations::~Specializations() = default;

std::shared_ptr<Executor> Specializations::get(const std::vector<int64_t>& values) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = programs_.find(values);
  if (it != programs_.end()) return it->second;
  // Compiled under the lock: one compile per binding even when calls race.
  tracer::TracedGraph copy{specialize_graph(traced_.graph, to_bindings(values)), traced_.constants};
  auto program = std::make_shared<Executor>(std::move(copy), *options_);
  ++compiled_;
  if (programs_.size() >= kMaxPrograms) {
    programs_.erase(order_.front());
    order_.erase(order_.begin());
  }
  programs_.emplace(values, program);
  order_.push_back(values);
  return program;
}

int Specializations::num_compiled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return compiled_;
}

}  // namespace ember::runtime
