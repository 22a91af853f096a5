/// \file
/// Python view of a traced graph: ember._C.Graph.
#include <ATen/core/dispatch/Dispatcher.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "graph/graph_hash.h"
#include "graph/ops.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "python/bindings.h"
#include "python/torch_caster.h"
#include "support/error.h"
#include "tracer/convert.h"
#include "tracer/trace_session.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

/// The graph that graph text `text` describes, as a traced graph: each op's argument names from
/// its schema in this process's dispatcher (the text carries only kwarg-only names, and the
/// scheduler looks arguments up by name). Constant inputs have no tensors in text: refused.
tracer::TracedGraph parse_traced_graph(const std::string& text) {
  graph::Graph g = graph::parse_graph(text);
  for (const graph::Input& in : g.inputs) {
    EMBER_CHECK(in.kind != graph::InputKind::Constant)
        << "graph text with a const input (%" << in.value
        << ") cannot become a traced graph: text carries no constant tensors";
  }
  for (graph::OpInfo& op : g.ops) {
    auto handle = c10::Dispatcher::singleton().findSchema({op.name, op.overload});
    EMBER_CHECK(handle.has_value()) << "no operator " << op.qualified_name() << " is registered";
    graph::OpInfo info = tracer::op_info(handle->schema());
    EMBER_CHECK(info.arg_names.size() == op.arg_names.size())
        << op.qualified_name() << " takes " << info.arg_names.size()
        << " arguments, the text gives " << op.arg_names.size();
    info.returns_list = op.returns_list;
    op = std::move(info);
  }
  return tracer::TracedGraph{std::move(g), {}};
}

}  // namespace

void bind_graph(nb::module_& m) {
  using tracer::TracedGraph;
  nb::class_<TracedGraph>(m, "Graph", "An ATen-level graph traced by ember, with its constants.")
      .def("__str__", [](const TracedGraph& g) { return graph::print_graph(g.graph); })
      .def("__repr__",
           [](const TracedGraph& g) {
             return "<ember Graph: " + std::to_string(g.graph.nodes.size()) + " nodes>";
           })
      .def_prop_ro("num_nodes", [](const TracedGraph& g) { return g.graph.nodes.size(); })
      .def_prop_ro("num_inputs", [](const TracedGraph& g) { return g.graph.inputs.size(); })
      .def_prop_ro("num_constants", [](const TracedGraph& g) { return g.graph.num_constants(); })
      .def_prop_ro("num_mutations", [](const TracedGraph& g) { return g.graph.mutations.size(); })
      .def_prop_ro("num_outputs", [](const TracedGraph& g) { return g.graph.outputs.size(); })
      .def_prop_ro("constants", [](const TracedGraph& g) { return g.constants; })
      .def_prop_ro(
          "ops",
          [](const TracedGraph& g) {
            std::vector<std::string> names;
            for (const graph::Node& n : g.graph.nodes) {
              names.push_back(g.graph.op_of(n).qualified_name());
            }
            return names;
          },
          "The qualified op name of each node, in order.")
      .def(
          "hash", [](const TracedGraph& g) { return graph::hash_graph(g.graph); },
          "Structural hash of the graph (stable across processes).")
      .def(
          "verify", [](const TracedGraph& g) { return graph::verify_graph(g.graph); },
          "Messages for each broken invariant; empty when the graph is valid.");
  m.def(
      "reprint_graph_text",
      [](const std::string& text) { return graph::print_graph(graph::parse_graph(text)); },
      nb::arg("text"),
      "The printer's text of the graph that graph text `text` parses to (graph/parser.h): equal "
      "to `text` for every text the printer wrote. Raises CompileError with line:column on bad "
      "text.");
  m.def("parse_traced_graph", &parse_traced_graph, nb::arg("text"),
        "The Graph that graph text `text` describes (graph/parser.h), ready for CompiledGraph: "
        "its ops' argument names come from their schemas. Raises CompileError on bad text and "
        "for a graph with const inputs (text holds no tensors).");
  m.def(
      "op_table_names",
      [] {
        std::vector<std::string> names;
        for (int i = 1; i <= graph::num_op_kinds(); ++i) {
          names.emplace_back(graph::op_name(static_cast<graph::OpKind>(i)));
        }
        return names;
      },
      "The operator name of each row of the op table (src/graph/ops.def), in order.");
}

}  // namespace ember::python
