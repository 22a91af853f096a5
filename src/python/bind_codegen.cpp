/// \file
/// Python view of the code generators, for tests and tools: the Triton source of a loop-IR kernel
/// (given as text) and the loop-IR reference interpreter.
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <array>
#include <optional>

#include "codegen/triton/triton_emitter.h"
#include "codegen/triton/triton_matmul.h"
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
              : t->form == codegen::TritonKernel::Form::Combo ? "combo"
                                                              : "rows";
  d["block_param"] = t->block_param;
  d["block"] = l.block;
  d["programs"] = l.programs;
  d["rows_per_program"] = t->rows_per_program;
  d["rows_param"] = t->rows_param;
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

loop::DType dtype_named(const std::string& t) {
  if (t == "f32") return loop::DType::Float32;
  if (t == "bf16") return loop::DType::BFloat16;
  if (t == "f16") return loop::DType::Float16;
  EMBER_CHECK(false) << "matmul dtype '" << t << "': expected f32, bf16 or f16";
  return loop::DType::Float32;
}

std::array<int64_t, 3> strides3(const std::vector<int64_t>& v, const char* what) {
  EMBER_CHECK(v.size() == 3) << what << ": expected 3 strides (batch, rows, cols), got "
                             << v.size();
  return {v[0], v[1], v[2]};
}

/// The matrix-product template for sizes (batch, m, n, k), dtypes and strides: its source and,
/// per configuration, the constexprs, warps, stages and grid.
nb::dict triton_matmul(const std::vector<int64_t>& sizes, const std::string& dtype,
                       const std::string& out_dtype, const std::vector<int64_t>& a_strides,
                       const std::vector<int64_t>& b_strides,
                       const std::vector<int64_t>& out_strides,
                       const std::optional<std::string>& bias_dtype,
                       const std::vector<int64_t>& bias_strides, bool allow_tf32) {
  EMBER_CHECK(sizes.size() == 4) << "matmul sizes: expected (batch, m, n, k)";
  codegen::MatmulSpec s;
  s.batch = sizes[0];
  s.m = sizes[1];
  s.n = sizes[2];
  s.k = sizes[3];
  s.a_dtype = s.b_dtype = dtype_named(dtype);
  s.out_dtype = dtype_named(out_dtype);
  s.a_strides = strides3(a_strides, "a_strides");
  s.b_strides = strides3(b_strides, "b_strides");
  s.out_strides = strides3(out_strides, "out_strides");
  if (bias_dtype) {
    s.bias_dtype = dtype_named(*bias_dtype);
    s.bias_strides = strides3(bias_strides, "bias_strides");
  }
  s.allow_tf32 = allow_tf32;
  std::string why;
  EMBER_UNSUPPORTED(codegen::matmul_supported(s, &why)) << "no matmul template: " << why;
  nb::dict d;
  d["name"] = "ember_mm";
  d["source"] = codegen::emit_triton_matmul(s, "ember_mm");
  nb::list configs;
  for (const codegen::MatmulConfig& c : codegen::matmul_configs(s)) {
    nb::dict cd;
    cd["BLOCK_M"] = c.block_m;
    cd["BLOCK_N"] = c.block_n;
    cd["BLOCK_K"] = c.block_k;
    cd["GROUP_M"] = c.group_m;
    cd["num_warps"] = c.num_warps;
    cd["num_stages"] = c.num_stages;
    auto g = codegen::matmul_grid(s, c);
    cd["grid"] = nb::make_tuple(g[0], g[1]);
    configs.append(cd);
  }
  d["configs"] = configs;
  return d;
}

}  // namespace

void bind_codegen(nb::module_& m) {
  m.def("triton_matmul", &triton_matmul, nb::arg("sizes"), nb::arg("dtype"), nb::arg("out_dtype"),
        nb::arg("a_strides"), nb::arg("b_strides"), nb::arg("out_strides"),
        nb::arg("bias_dtype") = nb::none(), nb::arg("bias_strides") = std::vector<int64_t>{},
        nb::arg("allow_tf32") = false,
        "The Triton matrix-product template (codegen/triton/triton_matmul.h) for sizes (batch, m, "
        "n, k), the operands' dtype ('f32', 'bf16', 'f16'), the result's, and (batch, rows, cols) "
        "strides: a dict with its kernel name, module source and configurations (constexprs, "
        "num_warps, num_stages, grid). Raises ember.Unsupported for what the template does not "
        "compute.");
  m.def("triton_kernel", &triton_kernel, nb::arg("kernel"), nb::arg("sizes"),
        "The Triton kernel of a loop-IR kernel (text): a dict with its name, module source, form "
        "('flat' or 'rows'), block parameter, and for `sizes` its block size and program count. "
        "Raises ember.Unsupported when the kernel has no Triton form.");
  m.def("loop_reference", &loop_reference, nb::arg("kernel"), nb::arg("sizes"), nb::arg("buffers"),
        "Runs a loop-IR kernel (text) in the reference interpreter on buffers given as lists of "
        "numbers; returns every buffer (outputs included) as a list of floats.");
}

}  // namespace ember::python
