/// \file
/// The boundary where ember's options enter C++: ember.config's dict becomes a CompileOptions
/// (support/options.h). Nothing below it reads the environment.
#pragma once

#include <nanobind/nanobind.h>

#include "support/options.h"

namespace ember::python {

/// The CompileOptions of `options`, a dict of "group.field" keys as
/// `ember.config.compile_options()` returns it, or None for the current `ember.config`. Also
/// applies its "cache.*" keys (runtime::configure_cache). Raises UserError naming an unknown key
/// or a value of the wrong type.
CompileOptions compile_options_from(nanobind::handle options);

}  // namespace ember::python
