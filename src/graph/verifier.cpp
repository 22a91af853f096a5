#include "graph/verifier.h"

#include <sstream>

#include "graph/pinned_symbols.h"
#include "graph/printer.h"
#include "support/error.h"

namespace ember::graph {
namespace {

/// Streams `parts` into one string; messages read as one sentence at their call site.
template <typename... Ts>
std::string cat(const Ts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

std::string dims_str(const Dims& d) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < d.size(); ++i) os << (i ? ", " : "") << d[i].str();
  os << "]";
  return os.str();
}

/// Walks the graph in definition order, recording where each value is defined and collecting one
/// message per broken invariant.
class Verifier {
 public:
  explicit Verifier(const Graph& g) : g_(g), defs_(g.values.size()) {}

  std::vector<std::string> run() {
    for (size_t i = 0; i < g_.inputs.size(); ++i) {
      define(g_.inputs[i].value, -1, static_cast<int32_t>(i), cat("input ", i));
    }
    for (size_t i = 0; i < g_.ops.size(); ++i) {
      const OpInfo& op = g_.ops[i];
      if (op.kind != op_kind(op.name)) {
        msgs_.push_back(
            cat("op ", i, " (", op.name, ") has kind '", op_name(op.kind), "', not its name's"));
      }
    }
    for (size_t n = 0; n < g_.nodes.size(); ++n) check_node(static_cast<int32_t>(n));
    after_nodes_ = true;
    for (size_t i = 0; i < g_.outputs.size(); ++i) use(g_.outputs[i], cat("output ", i));
    for (size_t i = 0; i < g_.mutations.size(); ++i) check_mutation(i);
    for (size_t v = 0; v < g_.values.size(); ++v) {
      if (!defs_[v].defined) msgs_.push_back(cat("value %", v, " is never defined"));
    }
    return std::move(msgs_);
  }

 private:
  /// Where a value is defined, as found by the walk (not as the value records it).
  struct DefSite {
    bool defined = false;
    int32_t node = -1;  ///< -1: a graph input
    int32_t index = 0;  ///< input position or output position
    std::string where;
  };

  bool exists(ValueId id) const { return id >= 0 && static_cast<size_t>(id) < g_.values.size(); }
  bool defined(ValueId id) const { return exists(id) && defs_[id].defined; }

  static std::string site_str(int32_t node, int32_t index) {
    return node < 0 ? cat("input ", index) : cat("node ", node, " output ", index);
  }

  /// Records that `id` is defined at (`node`, `index`) and checks the value's own record.
  void define(ValueId id, int32_t node, int32_t index, const std::string& where) {
    if (!exists(id)) {
      msgs_.push_back(cat(where, " defines %", id, ", which does not exist (the graph has ",
                          g_.values.size(), " values)"));
      return;
    }
    if (defs_[id].defined) {
      msgs_.push_back(
          cat("value %", id, " is defined again by ", where, " (first by ", defs_[id].where, ")"));
      return;
    }
    defs_[id] = DefSite{true, node, index, where};
    const Value& val = g_.values[id];
    if (val.node != node || val.index != index) {
      msgs_.push_back(cat("value %", id, " is defined by ", where, " but records ",
                          site_str(val.node, val.index)));
    }
    check_type(val.type, cat(where, " (%", id, ")"));
  }

  void check_type(const TensorType& t, const std::string& what) {
    if (t.sizes.size() != t.strides.size()) {
      msgs_.push_back(
          cat(what, " has ", t.sizes.size(), " sizes but ", t.strides.size(), " strides"));
    }
    for (size_t d = 0; d < t.sizes.size(); ++d) {
      if (t.sizes[d].is_constant() && t.sizes[d].constant() < 0) {
        msgs_.push_back(cat(what, " has negative size ", t.sizes[d].str(), " in dim ", d));
      }
    }
  }

  /// Checks that `id`, read by `where`, names a value defined before this point.
  void use(ValueId id, const std::string& where) {
    if (!exists(id)) {
      msgs_.push_back(cat(where, " names %", id, ", which does not exist (the graph has ",
                          g_.values.size(), " values)"));
    } else if (!defined(id) && after_nodes_) {
      msgs_.push_back(cat(where, " names %", id, ", which is never defined"));
    } else if (!defined(id)) {
      msgs_.push_back(cat(where, " uses %", id, " before it is defined"));
    }
  }

  void check_node(int32_t n) {
    const Node& node = g_.nodes[n];
    std::string label = cat("node ", n);
    if (node.op < 0 || static_cast<size_t>(node.op) >= g_.ops.size()) {
      msgs_.push_back(
          cat(label, " has op index ", node.op, " but the graph has ", g_.ops.size(), " ops"));
    } else {
      const OpInfo& op = g_.ops[node.op];
      label = cat(label, " (", op.qualified_name(), ")");
      if (node.args.size() != op.arg_names.size()) {
        msgs_.push_back(cat(label, " has ", node.args.size(), " arguments but the op takes ",
                            op.arg_names.size()));
      }
    }
    for (size_t a = 0; a < node.args.size(); ++a) {
      std::string where = cat(label, " argument ", a);
      if (const auto* ref = std::get_if<ValueRef>(&node.args[a])) {
        use(ref->id, where);
      } else if (const auto* list = std::get_if<ValueList>(&node.args[a])) {
        for (size_t i = 0; i < list->items.size(); ++i) {
          std::string item = cat(where, " item ", i);
          if (list->items[i]) {
            use(*list->items[i], item);
          } else if (!list->optional_items) {
            msgs_.push_back(cat(item, " is None but the list is not Tensor?[]"));
          }
        }
      }
    }
    // Outputs are defined after all arguments are read, so a node cannot use its own outputs.
    for (size_t i = 0; i < node.outputs.size(); ++i) {
      define(node.outputs[i], n, static_cast<int32_t>(i), cat(label, " output ", i));
    }
  }

  void check_mutation(size_t i) {
    const Mutation& m = g_.mutations[i];
    std::string label = cat("mutation ", i);
    size_t before = msgs_.size();
    use(m.input, cat(label, " target"));
    use(m.value, cat(label, " value"));
    if (msgs_.size() != before) return;
    const DefSite& target_def = defs_[m.input];
    if (target_def.node != -1) {
      msgs_.push_back(cat(label, " targets %", m.input, ", which is not a graph input"));
      return;
    }
    if (g_.inputs[target_def.index].kind == InputKind::Constant) {
      msgs_.push_back(cat(label, " targets %", m.input, ", which is a constant"));
    }
    const TensorType& target = g_.values[m.input].type;
    const TensorType& source = g_.values[m.value].type;
    if (target.dtype != source.dtype) {
      msgs_.push_back(cat(label, " writes ", dtype_name(source.dtype), " %", m.value, " into ",
                          dtype_name(target.dtype), " %", m.input));
    }
    // (A symbol pinned to a constant stays in the input's type: compared as the constant.)
    if (fold_pinned(target.sizes, g_.symbols) != fold_pinned(source.sizes, g_.symbols)) {
      msgs_.push_back(cat(label, " writes %", m.value, " of sizes ", dims_str(source.sizes),
                          " into %", m.input, " of sizes ", dims_str(target.sizes)));
    }
  }

  const Graph& g_;
  std::vector<DefSite> defs_;  ///< indexed by ValueId
  bool after_nodes_ = false;   ///< every definition has been seen
  std::vector<std::string> msgs_;
};

}  // namespace

std::vector<std::string> verify_graph(const Graph& g) {
  return Verifier(g).run();
}

void check_graph(const Graph& g) {
  std::vector<std::string> problems = verify_graph(g);
  if (problems.empty()) return;
  std::ostringstream text;
  text << "graph verification failed with " << problems.size() << " problem(s):\n";
  for (const std::string& p : problems) text << "  - " << p << "\n";
  EMBER_INTERNAL_ASSERT(problems.empty()) << text.str() << print_graph(g);
}

}  // namespace ember::graph
