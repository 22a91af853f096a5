#include "python/options.h"

#include <functional>
#include <map>
#include <string>
#include <type_traits>

#include <nanobind/stl/string.h>

#include "runtime/kernel_cache.h"
#include "support/error.h"

namespace nb = nanobind;

namespace ember::python {

namespace {

using Setter = std::function<void(CompileOptions&, nb::handle)>;

template <typename T>
T value_of(nb::handle v, const std::string& key) {
  // bool is an int in Python: an int field refuses it, as ember.config does.
  const bool is_bool = nb::isinstance<nb::bool_>(v);
  const bool number = (nb::isinstance<nb::int_>(v) || nb::isinstance<nb::float_>(v)) && !is_bool;
  const bool ok = std::is_same_v<T, bool>       ? is_bool
                  : std::is_integral_v<T>       ? nb::isinstance<nb::int_>(v) && !is_bool
                  : std::is_floating_point_v<T> ? number
                                                : nb::isinstance<nb::str>(v);
  EMBER_CHECK(ok) << "ember option " << key << ": expected "
                  << (std::is_same_v<T, bool>       ? "a bool"
                      : std::is_integral_v<T>       ? "an int"
                      : std::is_floating_point_v<T> ? "a number"
                                                    : "a str")
                  << ", got " << nb::repr(v).c_str();
  if constexpr (std::is_floating_point_v<T>) return nb::cast<double>(nb::float_(v));
  return nb::cast<T>(v);
}

#define EMBER_FIELD(group, field)                                                              \
  {                                                                                            \
#group "." #field,                                                                         \
        [](CompileOptions & o,                                                                 \
           nb::handle                                                                          \
               v) { o.group.field = value_of<decltype(o.group.field)>(v, #group "." #field); } \
  }

const std::map<std::string, Setter>& setters() {
  static const std::map<std::string, Setter> table = {
      EMBER_FIELD(capture, cache_size_limit),
      EMBER_FIELD(capture, logs),
      EMBER_FIELD(trace, splits_everywhere),
      EMBER_FIELD(trace, decompose_backward_everywhere),
      {"trace.cudnn_batch_norm",
       [](CompileOptions& o, nb::handle v) {
         using Mode = CompileOptions::Trace::CudnnBatchNorm;
         const std::string s = value_of<std::string>(v, "trace.cudnn_batch_norm");
         EMBER_CHECK(s == "stats" || s == "keep" || s == "off")
             << "ember option trace.cudnn_batch_norm: expected stats, keep or off, got " << s;
         o.trace.cudnn_batch_norm = s == "stats"  ? Mode::Stats
                                    : s == "keep" ? Mode::Keep
                                                  : Mode::Off;
       }},
      EMBER_FIELD(trace, disabled_rewrites),
      EMBER_FIELD(trace, pointwise_convolutions_as_products),
      EMBER_FIELD(sched, codegen),
      EMBER_FIELD(sched, reductions),
      EMBER_FIELD(sched, reduction_fusion),
      EMBER_FIELD(sched, combo_kernels),
      EMBER_FIELD(sched, stored_prologues),
      EMBER_FIELD(sched, depthwise_convolutions),
      EMBER_FIELD(sched, plan_cache),
      EMBER_FIELD(sched, plan_cache_min_seconds),
      EMBER_FIELD(codegen, cxx),
      EMBER_FIELD(codegen, libmvec),
      EMBER_FIELD(triton, enabled),
      EMBER_FIELD(triton, interpret),
      EMBER_FIELD(triton, autotune),
      EMBER_FIELD(triton, background_tuning),
      EMBER_FIELD(triton, persistent),
      EMBER_FIELD(triton, aligned_pointers),
      EMBER_FIELD(runtime, fold_constants),
      EMBER_FIELD(runtime, cuda_graphs),
      EMBER_FIELD(runtime, matmul_templates),
      EMBER_FIELD(runtime, launch_bound_products),
      EMBER_FIELD(runtime, fuse_attention),
      EMBER_FIELD(runtime, bias_apart),
      EMBER_FIELD(runtime, parameter_cache),
      EMBER_FIELD(training, min_cut),
      EMBER_FIELD(training, save_materialized),
      EMBER_FIELD(debug, verify_kernels),
      EMBER_FIELD(debug, live_bytes),
      EMBER_FIELD(debug, host_step_times),
      EMBER_FIELD(debug, dump_pipeline),
  };
  return table;
}

#undef EMBER_FIELD

}  // namespace

CompileOptions compile_options_from(nb::handle options) {
  nb::object dict = nb::borrow(options);
  if (dict.is_none()) dict = nb::module_::import_("ember.config").attr("compile_options")();
  EMBER_CHECK(nb::isinstance<nb::dict>(dict))
      << "ember options: expected a dict of \"group.field\" keys (ember.config.compile_options()), "
         "got "
      << nb::repr(dict).c_str();
  CompileOptions out;
  std::string cache_dir, prelude_dir;
  int64_t cache_max_mb = 2048;
  for (auto [k, v] : nb::cast<nb::dict>(dict)) {
    const std::string key = nb::cast<std::string>(k);
    if (key == "cache.dir") {
      cache_dir = value_of<std::string>(v, key);
    } else if (key == "cache.max_mb") {
      cache_max_mb = value_of<int64_t>(v, key);
    } else if (key == "cache.prelude_dir") {
      prelude_dir = value_of<std::string>(v, key);
    } else if (key == "capture.dynamic" || key == "capture.report") {
      // ember.compile's default for dynamic= and its report folder, python/ember/capture.py's.
    } else {
      auto it = setters().find(key);
      EMBER_CHECK(it != setters().end()) << "ember options: unknown option " << key;
      it->second(out, v);
    }
  }
  runtime::configure_cache(cache_dir, cache_max_mb, prelude_dir);
  return out;
}

}  // namespace ember::python
