/// \file
/// Output templates: how a value the frame produced (its return value, its state at a graph
/// break, a value it stored) is rebuilt on each call from the graph's outputs, the call's
/// source values and constants.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

#include "sym/expr.h"

namespace ember::capture {

/// How the return value is rebuilt from the graph's outputs.
struct OutputTemplate {
  enum class Kind : uint8_t {
    Tensor,
    Constant,
    Tuple,
    List,
    Dict,
    Source,
    BoundMethod,
    Object,
    Alias,  ///< the object an earlier List, Dict or Object template with the same slot built
    Size    ///< an int: `size` over the shape symbols, each read off a source tensor's dim
  };
  Kind kind = Kind::Constant;
  int index = -1;  ///< Tensor: graph output; Source: the source read
  /// List, Dict, Object made by the frame, and Alias: the slot of the built object in the
  /// call's memo, so that an object the frame's values share is built once; -1: none.
  int slot = -1;
  /// Constant: the value; Dict: the keys tuple; Object: its class; Tuple: a namedtuple's class
  /// (none for a tuple).
  nanobind::object value;
  /// Tuple, List, Dict: the items; BoundMethod: its self; Object: a Dict of its attributes,
  /// then (for a dict subclass) a Dict of its items.
  std::vector<OutputTemplate> items;
  /// Object of a dict subclass: its static base (dict or OrderedDict), whose item assignment
  /// sets the items without running the class's own __setitem__.
  nanobind::object base;
  /// Size: the expression, and per symbol id it reads, the tensor source and the dim whose size
  /// binds it (Interpreter::symbol_sources).
  sym::SymExpr size;
  std::vector<std::pair<sym::SymbolId, std::pair<int, int64_t>>> size_sources;
};

/// Builds the value `t` describes, from the graph's outputs and the call's source values.
/// `memo` holds the objects built so far for this call by slot: templates built for one call
/// share it.
nanobind::object build_output(const OutputTemplate& t, const std::vector<at::Tensor>& outs,
                              const std::vector<nanobind::object>& values,
                              std::vector<nanobind::object>& memo);

/// The same with a memo of its own.
nanobind::object build_output(const OutputTemplate& t, const std::vector<at::Tensor>& outs,
                              const std::vector<nanobind::object>& values);

}  // namespace ember::capture
