/// \file
/// Python view of a traced graph: ember._C.Graph.
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "graph/graph_hash.h"
#include "graph/ops.h"
#include "graph/parser.h"
#include "graph/printer.h"
#include "graph/verifier.h"
#include "python/bindings.h"
#include "python/torch_caster.h"
#include "tracer/trace_session.h"

namespace nb = nanobind;

namespace ember::python {

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
