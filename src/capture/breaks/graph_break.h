/// \file
/// Graph breaks: when the top frame meets what capture cannot record at instruction `pc`, the
/// capture stops just before it (Interpreter::run with stop_at) and the frame is rewritten:
///
///   transformed code of the frame (runs in place of the original, via the hook's trampoline):
///     RESUME
///     __tmp = <segment>(arg0, ..., argN-1)   # the graph so far, run from C++; returns the
///                                            # frame's stack and bound locals, rebuilt
///     <push the stack from __tmp>; <store the locals from __tmp>
///     <the unsupported instruction, run by CPython>
///     return <resume>(*stack, *locals)       # for a conditional jump: one tail per branch
///
///   resume function (one per continuation): arguments = the stack at the continuation, then the
///   bound locals; body = RESUME; push the stack arguments; JUMP into a copy of the original
///   bytecode at the continuation. It is an ordinary function: the hook captures it when the
///   transformed code calls it, so the rest of the frame becomes the next graph (and may break
///   again).
///
/// Contract: the frame has no cells or free variables, the instruction is not inside a try
/// block (Interpreter's breakable()), and every value on the stack and in the locals can be
/// rebuilt from graph outputs, sources and constants (else Unsupported). No NULL may remain on
/// the stack after the instruction.
#pragma once

#include <Python.h>
#include <nanobind/nanobind.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "capture/bytecode/instruction.h"
#include "capture/compile/compiled_frame.h"
#include "capture/interp/interpreter.h"
#include "capture/interp/side_effects.h"

namespace ember::capture {

/// The graph before a break and how to rebuild the frame's state from it; called by the
/// transformed code with the frame's argument values.
struct Segment {
  SourceTable sources;
  std::vector<int> input_sources;
  std::unique_ptr<GraphRunner> runner;
  std::vector<OutputTemplate> values;  ///< the tuple it returns: stack bottom-up, then locals
  std::vector<AttrStore> stores;       ///< replayed after the graph
  nanobind::object code;               ///< the original code object
  nanobind::object globals;
  nanobind::object builtins;
  int nargs = 0;
};

/// Builds the per-value templates of `state` (graph outputs appended to `tensors`), and of the
/// interpreter's attribute stores into `stores`. Throws Unsupported for a value that cannot be
/// rebuilt.
///
/// What each builtin iterator of a break's state had left (a loop's iterator: a list_iterator,
/// a dict_valueiterator), by the iterator. Reading an iterator empties it, so every pass over one
/// state shares one of these.
using IteratorRests = std::unordered_map<PyObject*, nanobind::object>;

/// `inputs_as_sources`: for a graph whose segment mutates inputs, a second pass over the state
/// (with the first pass's `rests`). A graph input's tensor is read again from its source (the
/// caller's tensor, updated by the graph), so that the rest of the frame sees the same object; a
/// tensor the graph computed is a graph output as in the first pass (the same walk, so the same
/// output indices), and a view it computed is Unsupported (a graph output is a new tensor, which
/// would not alias what it viewed).
std::vector<OutputTemplate> state_templates(const StopState& state, const Interpreter& interp,
                                            std::vector<at::Tensor>& tensors,
                                            std::vector<AttrStore>& stores, IteratorRests& rests,
                                            bool inputs_as_sources = false);

/// The template of one value (a frame's return value), and those of the stores.
OutputTemplate value_template(nanobind::handle v, const Interpreter& interp,
                              std::vector<at::Tensor>& tensors, std::vector<AttrStore>& stores);

/// A Python callable running `segment` (it owns it).
nanobind::object make_segment_callable(std::shared_ptr<Segment> segment);

/// The transformed code of the frame (see the file comment). `segment` is the callable of
/// make_segment_callable. Also returns the resume functions it calls.
struct BreakCode {
  nanobind::object code;
  std::vector<nanobind::object> resumes;
  std::vector<nanobind::object> generated;  ///< code objects that must run as they are
};
BreakCode build_break_code(PyCodeObject* co, PyObject* globals, const bytecode::Code& bc,
                           const StopState& state, nanobind::handle segment);

}  // namespace ember::capture
