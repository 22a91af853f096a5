/// \file
/// Side effects of a captured frame on objects from outside it: attribute stores, and mutations
/// of lists and dicts.
///
/// While the interpreter runs, a store to an attribute of an object read from a source is done
/// for real (so that everything the frame reads afterwards sees it) and recorded with the
/// attribute's previous state; when the interpreter stops, every such store is undone. The
/// compiled frame replays them after its graph runs: each recorded (object source, attribute)
/// gets the last value the frame stored, rebuilt from a template. Replaying after the graph is
/// what eager does, up to order: the graph reads no attribute.
///
/// A list or dict read from a source is a copy in the frame (Interpreter::wrap); the frame
/// mutates its copy, and the compiled frame writes the copy's final items into the original
/// (`lst[:] = items`; `d.clear(); d.update(items)`), keeping the original's identity.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <vector>

#include "capture/compile/output_template.h"

namespace ember::capture {

/// One attribute store to replay: `values[object_source].name = <value>`; without a name, the
/// items of a list or dict to write into `values[object_source]`.
struct AttrStore {
  int object_source = -1;
  nanobind::object name;
  OutputTemplate value;
};

/// Replays `stores` in order, after a graph that returned `outs`, with the call's source
/// values `values` and the call's template memo (output_template.h).
void apply_stores(const std::vector<AttrStore>& stores, const std::vector<at::Tensor>& outs,
                  const std::vector<nanobind::object>& values, std::vector<nanobind::object>& memo);

}  // namespace ember::capture
