/// \file
/// Python view of the code generators, for tests and tools: the Triton source of a loop-IR kernel
/// (given as text) and the loop-IR reference interpreter.
#include <nanobind/stl/map.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "codegen/triton/triton_emitter.h"
#include "loop/eval.h"
#include "loop/parser.h"
#include "python/bindings.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

nb::dict triton_kernel(const std::string& text, const std::map<std::string, int64_t>& sizes) {
  loop::Kernel k = loop::parse_kernel(text);
  std::string why;
  std::optional<codegen::TritonKernel> t = codegen::emit_triton(k, &why);
  EMBER_UNSUPPORTED(t.has_value()) << "kernel " << k.name << " has no Triton form: " << why;
  codegen::TritonLaunch l = codegen::triton_launch(*t, loop::Bindings(sizes.begin(), sizes.end()));
  nb::dict d;
  d["name"] = t->name;
  d["source"] = t->source;
  d["form"] = t->form == codegen::TritonKernel::Form::Flat    ? "flat"
              : t->form == codegen::TritonKernel::Form::Tiled ? "tiled"
                                                              : "rows";
  d["block_param"] = t->block_param;
  d["block"] = l.block;
  d["programs"] = l.programs;
  d["rows_per_program"] = t->rows_per_program;
  return d;
}

/// Runs the kernel on buffers given as lists of numbers; returns every buffer afterwards.
nb::dict loop_reference(const std::string& text, const std::map<std::string, int64_t>& sizes,
                        const std::map<std::string, std::vector<double>>& buffers) {
  loop::Kernel k = loop::parse_kernel(text);
  loop::BufferMap map;
  for (const auto& [name, values] : buffers) {
    const loop::BufferParam* p = k.find_buffer(name);
    EMBER_CHECK(p != nullptr) << "kernel " << k.name << " has no buffer " << name;
    std::vector<loop::Scalar>& v = map[name];
    for (double x : values) {
      v.push_back(loop::is_float(p->dtype)
                      ? loop::Scalar::of_float(p->dtype, x)
                      : loop::Scalar::of_int(p->dtype, static_cast<int64_t>(x)));
    }
  }
  loop::run_kernel(k, loop::Bindings(sizes.begin(), sizes.end()), map);
  nb::dict out;
  for (const auto& [name, values] : map) {
    std::vector<double> v;
    for (const loop::Scalar& s : values) v.push_back(s.as_double());
    out[name.c_str()] = v;
  }
  return out;
}

}  // namespace

void bind_codegen(nb::module_& m) {
  m.def("triton_kernel", &triton_kernel, nb::arg("kernel"), nb::arg("sizes"),
        "The Triton kernel of a loop-IR kernel (text): a dict with its name, module source, form "
        "('flat' or 'rows'), block parameter, and for `sizes` its block size and program count. "
        "Raises ember.Unsupported when the kernel has no Triton form.");
  m.def("loop_reference", &loop_reference, nb::arg("kernel"), nb::arg("sizes"), nb::arg("buffers"),
        "Runs a loop-IR kernel (text) in the reference interpreter on buffers given as lists of "
        "numbers; returns every buffer (outputs included) as a list of floats.");
}

}  // namespace ember::python
