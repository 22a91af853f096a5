/// \file
/// Python view of the tracer: ember._C.TraceSession.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "python/bindings.h"
#include "python/options.h"
#include "python/torch_caster.h"
#include "rewrite/conv_layout.h"
#include "rewrite/rewrites.h"
#include "support/error.h"
#include "tracer/backward_walk.h"
#include "tracer/dispatch.h"
#include "tracer/grad_inputs.h"
#include "tracer/meta_cache.h"
#include "tracer/trace_session.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

graph::InputKind parse_kind(const std::string& kind) {
  if (kind == "user") return graph::InputKind::User;
  if (kind == "param") return graph::InputKind::Parameter;
  if (kind == "buffer") return graph::InputKind::Buffer;
  EMBER_CHECK(false) << "unknown input kind '" << kind << "' (expected user, param or buffer)";
  return graph::InputKind::User;
}

}  // namespace

void bind_tracer(nb::module_& m) {
  tracer::register_tracer_kernels();
  rewrite::register_rewrite_kernels();
  m.def(
      "timed_convolutions",
      [] {
        nb::list out;
        for (const rewrite::TimedConvolution& t : rewrite::timed_convolutions()) {
          nb::dict d;
          d["key"] = t.key;
          d["nchw_ms"] = t.nchw_seconds * 1e3;
          d["nhwc_ms"] = t.nhwc_seconds * 1e3;
          d["nchw"] = t.nchw;
          out.append(d);
        }
        return out;
      },
      "The CUDA convolution shapes timed on both layouts in this process (Note [Grouped "
      "convolutions by timing]): key (input; weight; stride; padding; dilation; groups; dtype; "
      "device), ms per call on NCHW and on NHWC, and whether NCHW was taken.");
  m.def("clear_meta_cache", &tracer::clear_meta_cache,
        "Empties the tracer's cache of meta-kernel results (for measurements).");
  m.def("meta_cache_size", &tracer::meta_cache_size, "Entries in the meta-kernel result cache.");
  m.def("walk_backward", &tracer::walk_backward, nb::arg("outputs"), nb::arg("tangents"),
        nb::arg("inputs"),
        "torch.autograd.grad(outputs, inputs, tangents, allow_unused=True) without autograd's "
        "engine (Note [A backward without autograd's engine]): for tracing on a device this "
        "torch lacks. Undefined tensors (None) where no output reaches an input.");
  nb::class_<tracer::GradInputs>(
      m, "GradInputs",
      "The traced inputs that require grad in a joint trace (Note [Traced inputs modified in "
      "place], tracer/grad_inputs.h).")
      .def(nb::init<>())
      .def("add", &tracer::GradInputs::add, nb::arg("tensor"), nb::arg("leaf"),
           "Makes tracer tensor `tensor` require grad: a leaf of autograd's graph when `leaf`, "
           "else a non-leaf the program may modify in place.")
      .def("modified_in_place", &tracer::GradInputs::modified_in_place,
           "Positions (in add order) of the inputs an in-place op changed under grad mode.")
      .def(
          "gradients",
          [](const tracer::GradInputs& g, const std::vector<at::Tensor>& outputs,
             const std::vector<at::Tensor>& tangents, bool walk) {
            nb::gil_scoped_release no_gil;  // meta kernels written in Python take it
            return g.gradients(outputs, tangents, walk);
          },
          nb::arg("outputs"), nb::arg("tangents"), nb::arg("walk") = false,
          "torch.autograd.grad(outputs, inputs, tangents, allow_unused=True) at each input's "
          "gradient edge from before the program (None where none arrives); `walk`: without "
          "autograd's engine (walk_backward).");
  m.def(
      "rewrite_table",
      [] {
        nb::list out;
        for (const tracer::Rewrite& r : rewrite::rewrite_table()) {
          nb::list ops;
          for (graph::OpKind k : r.ops) ops.append(std::string(graph::op_name(k)));
          if (!r.prefix.empty()) ops.append(std::string(r.prefix) + "*");
          nb::dict d;
          d["name"] = r.name;
          d["ops"] = ops;
          d["device"] = tracer::where_name(r.where);
          const char* option = tracer::widening_option(r.widened_by);
          d["widened_by"] = *option ? nb::cast(std::string(option)) : nb::none();
          d["when"] = r.when;
          d["does"] = r.does;
          out.append(d);
        }
        return out;
      },
      "The trace-time rewrites in the order the tracer tries them (src/rewrite/rewrites.h): "
      "dicts of name, ops, device (the devices it applies on: 'any', 'cuda' or 'nowhere'), "
      "widened_by (the option that widens it to every device, or None), when (what else it "
      "requires) and does.");
  using tracer::TraceSession;
  nb::class_<TraceSession>(m, "TraceSession",
                           "Records the ATen ops run on tracer tensors into a Graph. Use:\n"
                           "  s = TraceSession(); x = s.add_input(t, 'user', 'x')\n"
                           "  with s: out = fn(x)\n"
                           "  graph = s.finish([out])")
      .def(
          "__init__",
          [](TraceSession* self, nb::handle options) {
            new (self) TraceSession(compile_options_from(options), rewrite::rewrite_table());
          },
          nb::arg("options").none() = nb::none(),
          "`options`: ember.config.compile_options() (None: the current ember.config); its "
          "trace.* keys decide the trace-time rewrites.")
      .def(
          "add_input",
          [](TraceSession& s, const at::Tensor& example, const std::string& kind,
             const std::string& name, std::optional<std::string> device,
             const std::vector<int64_t>& dynamic_dims,
             const std::vector<std::string>& symbol_keys) {
            std::optional<c10::Device> d;
            if (device.has_value()) d = c10::Device(*device);
            return s.add_input(example, parse_kind(kind), name, d, dynamic_dims, symbol_keys);
          },
          nb::arg("example"), nb::arg("kind") = "user", nb::arg("name") = "",
          nb::arg("device").none() = nb::none(), nb::arg("dynamic_dims") = std::vector<int64_t>{},
          nb::arg("symbol_keys") = std::vector<std::string>{},
          "A tracer tensor for a graph input like `example`; `device` (\"cuda:0\") overrides "
          "the device it reports; `dynamic_dims`: dims whose size is a shape symbol; "
          "`symbol_keys` (one per dynamic dim): dims with equal keys share one symbol.")
      .def(
          "add_input_like",
          [](TraceSession& s, const at::Tensor& like, const std::string& kind,
             const std::string& name) { return s.add_input_like(like, parse_kind(kind), name); },
          nb::arg("like"), nb::arg("kind") = "user", nb::arg("name") = "",
          "A tracer tensor for a new contiguous graph input of the traced tensor `like`'s "
          "sizes (its expressions over the trace's symbols), dtype and device: a tangent.")
      .def(
          "__enter__",
          [](TraceSession& s) -> TraceSession& {
            s.enter();
            return s;
          },
          nb::rv_policy::reference)
      .def(
          "__exit__", [](TraceSession& s, nb::handle, nb::handle, nb::handle) { s.exit(); },
          nb::arg().none(), nb::arg().none(), nb::arg().none())
      .def("finish", &TraceSession::finish, nb::arg("outputs"))
      .def("rethrow_pending_error", &TraceSession::rethrow_pending_error,
           "Re-raises the first ember error raised inside the trace with its own type, if any.")
      .def_prop_ro("num_nodes", [](const TraceSession& s) { return s.graph().nodes.size(); });
  m.def(
      "size_guards",
      [](const tracer::TracedGraph& g) {
        std::vector<std::string> out;
        for (const sym::SizeGuard& guard : g.size_guards) out.push_back(sym::print(guard));
        return out;
      },
      nb::arg("graph"),
      "The size guards of a traced graph, as text (`s0 > 8`, `not (s0 == s1)`): the relations "
      "between symbolic sizes its trace relied on.");
}

}  // namespace ember::python
