#include "capture/breaks/graph_break.h"

#include <nanobind/stl/string.h>
#include <torch/csrc/autograd/python_variable.h>

#include <unordered_map>
#include <unordered_set>

#include "capture/breaks/with_reentry.h"
#include "capture/bytecode/assembler.h"
#include "capture/interp/interpreter_internal.h"
#include "support/error.h"
#include "sym/parser.h"
#include "sym/simplify.h"

namespace nb = nanobind;

namespace ember::capture {

using bytecode::Instr;
using bytecode::Op;

namespace {

/// Iterators of builtin types, whose remaining items can be read without running program code.
bool is_builtin_iterator(PyObject* o) {
  if (PyGen_Check(o)) return false;
  std::string_view n(Py_TYPE(o)->tp_name);
  for (std::string_view k : {"list_iterator", "list_reverseiterator", "tuple_iterator",
                             "range_iterator", "longrange_iterator", "enumerate", "zip", "reversed",
                             "dict_keyiterator", "dict_valueiterator", "dict_itemiterator",
                             "str_ascii_iterator", "str_iterator", "set_iterator"}) {
    if (n == k) return true;
  }
  return false;
}

struct TemplateBuilder {
  const Interpreter& interp;
  std::vector<at::Tensor>& tensors;
  std::unordered_map<const c10::TensorImpl*, int> tensor_index;
  std::unordered_map<PyObject*, int> slots;  ///< frame-made containers and objects seen
  int next_slot = 0;
  /// A break's state: a builtin iterator becomes the list of what it has left (build_resume
  /// iterates it again). Elsewhere (a return value, a stored value) it can not be rebuilt.
  bool iterators_as_lists = false;
  /// See state_templates.
  bool inputs_as_sources = false;
  /// What each loop iterator of the state had left, read once (see state_templates).
  IteratorRests* rests = nullptr;

  /// An Alias template if `o` was seen before; else gives it a slot in `t`.
  bool alias(PyObject* o, OutputTemplate& t) {
    auto [it, added] = slots.emplace(o, next_slot);
    if (!added) {
      t.kind = OutputTemplate::Kind::Alias;
      t.slot = it->second;
      return true;
    }
    t.slot = next_slot++;
    return false;
  }

  /// The interpreter's stores to objects from outside the frame, with templates of their values.
  std::vector<AttrStore> stores() {
    std::vector<AttrStore> out;
    for (const Interpreter::Store& s : interp.stores()) {
      out.push_back(AttrStore{s.source, s.name, of(s.value)});
    }
    for (const auto& [copy, source] : interp.mutated_containers()) {
      // The copy's items, as a new list or dict, written into the original.
      OutputTemplate t;
      if (PyDict_CheckExact(copy.ptr())) {
        t = dict_of(copy);
      } else {
        t.kind = OutputTemplate::Kind::List;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(copy.ptr()); ++i) {
          t.items.push_back(of(PyList_GET_ITEM(copy.ptr(), i)));
        }
      }
      out.push_back(AttrStore{source, nb::object(), std::move(t)});
    }
    return out;
  }

  /// A Dict template of the items of `d` (a dict, or an object whose items() a dict makes).
  OutputTemplate dict_of(nb::handle d, int slot = -1) {
    OutputTemplate t;
    t.kind = OutputTemplate::Kind::Dict;
    t.slot = slot;
    nb::object keys = nb::steal(PyList_New(0));
    PyObject* key = nullptr;
    PyObject* value = nullptr;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d.ptr(), &pos, &key, &value)) {
      EMBER_UNSUPPORTED(is_guardable_constant(key))
          << "a dict with a key of type " << Py_TYPE(key)->tp_name;
      PyList_Append(keys.ptr(), key);
      t.items.push_back(of(value));
    }
    t.value = nb::steal(PyList_AsTuple(keys.ptr()));
    return t;
  }

  /// An Object template of `v`, an object of a plain class whose static base is `base`.
  OutputTemplate object_of(nb::handle v, PyTypeObject* base) {
    OutputTemplate t;
    if (alias(v.ptr(), t)) return t;
    t.kind = OutputTemplate::Kind::Object;
    t.value = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(v.ptr())));
    nb::object attrs = nb::steal(PyObject_GenericGetDict(v.ptr(), nullptr));
    if (!attrs.is_valid()) throw nb::python_error();
    t.items.push_back(dict_of(attrs));
    if (base != &PyBaseObject_Type) {
      // Its items in its own order (an OrderedDict's may differ from the dict's).
      nb::object items = nb::steal(PyDict_New());
      nb::object pairs =
          nb::steal(PyObject_CallMethod(reinterpret_cast<PyObject*>(base), "items", "O", v.ptr()));
      if (!items.is_valid() || !pairs.is_valid()) throw nb::python_error();
      nb::object it = nb::steal(PyObject_GetIter(pairs.ptr()));
      if (!it.is_valid()) throw nb::python_error();
      while (PyObject* pair = PyIter_Next(it.ptr())) {
        nb::object p = nb::steal(pair);
        if (PyDict_SetItem(items.ptr(), PyTuple_GET_ITEM(pair, 0), PyTuple_GET_ITEM(pair, 1)) < 0) {
          throw nb::python_error();
        }
      }
      if (PyErr_Occurred()) throw nb::python_error();
      t.items.push_back(dict_of(items));
      t.base = nb::borrow(reinterpret_cast<PyObject*>(base));
    }
    return t;
  }

  /// A Size template of `v`, a torch.SymInt over the trace's shape symbols: its expression (read
  /// back from the SizeNode's text), evaluated per call from the sizes of the tensors whose dims
  /// the symbols are.
  OutputTemplate size_of(nb::handle v) {
    OutputTemplate t;
    t.kind = OutputTemplate::Kind::Size;
    nb::object text = nb::steal(PyObject_CallMethod(v.ptr(), "__str__", nullptr));
    if (!text.is_valid()) throw nb::python_error();
    const sym::ShapeEnv& env = interp.session().graph().symbols;
    t.size = sym::simplify(sym::parse(nb::cast<std::string>(text), env), env);
    if (t.size.is_constant()) {
      t.kind = OutputTemplate::Kind::Constant;
      t.value = nb::steal(PyLong_FromLongLong(t.size.constant()));
      return t;
    }
    // Every symbol is bound (a few sizes read per call); evaluate() reads the ones it needs.
    const auto& sources = interp.symbol_sources();
    EMBER_UNSUPPORTED(sources.size() == env.symbols().size())
        << "a size in the frame's state reads a shape symbol without a source";
    for (size_t id = 0; id < sources.size(); ++id) {
      t.size_sources.emplace_back(static_cast<sym::SymbolId>(id), sources[id]);
    }
    return t;
  }

  OutputTemplate of(nb::handle v) {
    OutputTemplate t;
    PyObject* o = v.ptr();
    if (THPVariable_Check(o) && inputs_as_sources) {
      int source = interp.input_source_of(v);
      if (source >= 0) {
        t.kind = OutputTemplate::Kind::Source;
        t.index = source;
        return t;
      }
      // A tensor the graph computed is one of its outputs, as without mutations (this pass
      // meets the tensors in the first pass's order, so they keep its output indices), unless
      // it is a view (a graph output is a new tensor, which would not alias what it viewed).
      EMBER_UNSUPPORTED(!THPVariable_Unpack(o).is_view())
          << "the graph before it mutates an input, and the frame's state holds a view it "
          << "computed";
    }
    if (THPVariable_Check(o)) {
      // A graph input itself (a parameter a callee holds): read from its source, not passed
      // through the graph (whose outputs would not carry its requires_grad under no_grad).
      if (int source = interp.input_source_of(v); source >= 0) {
        t.kind = OutputTemplate::Kind::Source;
        t.index = source;
        return t;
      }
      const at::Tensor& tensor = THPVariable_Unpack(o);
      auto it = tensor_index.find(tensor.unsafeGetTensorImpl());
      t.kind = OutputTemplate::Kind::Tensor;
      if (it != tensor_index.end()) {
        t.index = it->second;
      } else {
        t.index = static_cast<int>(tensors.size());
        tensor_index.emplace(tensor.unsafeGetTensorImpl(), t.index);
        tensors.push_back(tensor);
      }
      return t;
    }
    if (is_guardable_constant(o)) {
      t.kind = OutputTemplate::Kind::Constant;
      t.value = nb::borrow(v);
      return t;
    }
    int source = interp.source_of_value(v);
    if (source >= 0) {
      t.kind = OutputTemplate::Kind::Source;
      t.index = source;
      return t;
    }
    if (PyTuple_Check(o) && !PyTuple_CheckExact(o) && interp.created_here(v) &&
        is_namedtuple_class(reinterpret_cast<PyObject*>(Py_TYPE(o)))) {
      t.kind = OutputTemplate::Kind::Tuple;
      t.value = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(o)));
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
        t.items.push_back(of(PyTuple_GET_ITEM(o, i)));
      }
      return t;
    }
    if (PyTuple_CheckExact(o) || PyList_CheckExact(o) || PyDict_CheckExact(o)) {
      if (!PyTuple_CheckExact(o) && alias(o, t)) return t;
      if (PyDict_CheckExact(o)) {
        t = dict_of(v, t.slot);
      } else {
        t.kind = PyTuple_CheckExact(o) ? OutputTemplate::Kind::Tuple : OutputTemplate::Kind::List;
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(o); ++i) {
          t.items.push_back(of(PySequence_Fast_GET_ITEM(o, i)));
        }
      }
      return t;
    }
    if (interp.created_here(v)) {
      if (PyTypeObject* base = rebuildable_object_type(v)) return object_of(v, base);
    }
    if (PyMethod_Check(o) || (PyCFunction_Check(o) && PyCFunction_GET_SELF(o) != nullptr &&
                              !PyModule_Check(PyCFunction_GET_SELF(o)))) {
      PyObject* self = PyMethod_Check(o) ? PyMethod_GET_SELF(o) : PyCFunction_GET_SELF(o);
      nb::object name = nb::steal(PyObject_GetAttrString(o, "__name__"));
      if (!name.is_valid()) throw nb::python_error();
      t.kind = OutputTemplate::Kind::BoundMethod;
      t.value = name;
      t.items.push_back(of(self));
      return t;
    }
    if (iterators_as_lists && interp.created_here(v) && is_builtin_iterator(o)) {
      // A loop's iterator: the list of what it has left (consumed here: the capture's own
      // iterator is not used again); the resume function iterates over it (build_resume).
      EMBER_UNSUPPORTED(alias(o, t) == false) << "an iterator the frame's state holds twice";
      // Reading it empties it: a second pass over the same state (a graph with mutations) reads
      // the items the first one took, or its loop would resume with nothing left.
      nb::object rest;
      if (auto known = rests->find(o); known != rests->end()) {
        rest = known->second;
      } else {
        rest = nb::steal(PySequence_List(o));
        if (!rest.is_valid()) throw nb::python_error();
        rests->emplace(o, rest);
      }
      t.kind = OutputTemplate::Kind::List;
      for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rest.ptr()); ++i) {
        t.items.push_back(of(PyList_GET_ITEM(rest.ptr(), i)));
      }
      return t;
    }
    static PyObject* sym_int = imported("torch", "SymInt");
    if (reinterpret_cast<PyObject*>(Py_TYPE(o)) == sym_int) return size_of(v);
    if (std::string_view(Py_TYPE(o)->tp_name) == "torch.Size") {
      // A shape with symbolic sizes: a torch.Size of its items, each rebuilt per call.
      bool symbolic = false;
      for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
        symbolic |= reinterpret_cast<PyObject*>(Py_TYPE(PyTuple_GET_ITEM(o, i))) == sym_int;
      }
      if (symbolic) {
        t.kind = OutputTemplate::Kind::Tuple;
        t.value = nb::borrow(reinterpret_cast<PyObject*>(Py_TYPE(o)));
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(o); ++i) {
          t.items.push_back(of(PyTuple_GET_ITEM(o, i)));
        }
        return t;
      }
    }
    bool stateless = PyModule_Check(o) || PyType_Check(o) || PyCFunction_Check(o) ||
                     (PyFunction_Check(o) && !interp.created_here(v));
    std::string_view tname(Py_TYPE(o)->tp_name);
    if (PySlice_Check(o)) {
      auto* sl = reinterpret_cast<PySliceObject*>(o);
      stateless = is_guardable_constant(sl->start) && is_guardable_constant(sl->stop) &&
                  is_guardable_constant(sl->step);
    }
    stateless = stateless || PyRange_Check(o) || tname == "torch.dtype" ||
                tname == "torch.device" || tname == "torch.Size" || tname == "method_descriptor" ||
                tname == "wrapper_descriptor";
    EMBER_UNSUPPORTED(stateless) << "a " << Py_TYPE(o)->tp_name
                                 << " in the frame's state at the graph break can not be rebuilt";
    t.kind = OutputTemplate::Kind::Constant;
    t.value = nb::borrow(v);
    return t;
  }
};

// --- The segment callable -----------------------------------------------------------------

PyObject* segment_call(PyObject* capsule, PyObject* const* args, Py_ssize_t nargs) {
  auto* seg =
      static_cast<std::shared_ptr<Segment>*>(PyCapsule_GetPointer(capsule, "ember.segment"));
  if (seg == nullptr) return nullptr;
  const Segment& s = **seg;
  try {
    if (nargs != s.nargs) {
      PyErr_Format(PyExc_RuntimeError, "ember: a graph segment got %zd arguments, expected %d",
                   nargs, s.nargs);
      return nullptr;
    }
    FrameView f;
    f.code = reinterpret_cast<PyCodeObject*>(s.code.ptr());
    f.globals = s.globals.ptr();
    f.builtins = s.builtins.ptr();
    f.localsplus = args;
    f.nlocalsplus = static_cast<int>(nargs);
    std::vector<nb::object> values;
    int failed;
    {
      HookPause pause;  // reading sources runs no code of the program's worth capturing
      failed = s.sources.evaluate(f, values);
    }
    if (failed >= 0) {
      PyErr_Format(PyExc_RuntimeError, "ember: %s could not be read by a graph segment",
                   s.sources.name(failed).c_str());
      return nullptr;
    }
    std::vector<at::Tensor> inputs;
    inputs.reserve(s.input_sources.size());
    for (int i : s.input_sources) {
      inputs.push_back(THPVariable_Unpack(values[static_cast<size_t>(i)].ptr()));
    }
    std::vector<at::Tensor> outs = s.runner->run(inputs);
    std::vector<nb::object> memo;
    nb::object tuple = nb::steal(PyTuple_New(static_cast<Py_ssize_t>(s.values.size())));
    for (size_t i = 0; i < s.values.size(); ++i) {
      PyTuple_SET_ITEM(tuple.ptr(), static_cast<Py_ssize_t>(i),
                       build_output(s.values[i], outs, values, memo).release().ptr());
    }
    apply_stores(s.stores, outs, values, memo);
    return tuple.release().ptr();
  } catch (nb::python_error& e) {
    e.restore();
    return nullptr;
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyMethodDef segment_def = {
    "ember_graph_segment",
    reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(segment_call)), METH_FASTCALL,
    "Runs a captured graph and rebuilds the frame's state."};

void segment_free(PyObject* capsule) {
  delete static_cast<std::shared_ptr<Segment>*>(PyCapsule_GetPointer(capsule, "ember.segment"));
}

// --- Bytecode ------------------------------------------------------------------------------

/// Appends constants to a code object's co_consts; returns their indices.
/// Whether the top frame's stack value `i` is the __exit__ of a with block the break's code
/// enters again (StopState::reenter): made by that code, not by the segment.
bool reentered(const std::vector<nb::object>& reenter, size_t i) {
  return i < reenter.size() && reenter[i].is_valid();
}
bool reentered(const StopState& state, size_t i) {
  return reentered(state.reenter, i);
}

/// Stack depth after `in` runs, given the depth before (falls through / jumps alike).
int depth_after(const Instr& in, int depth) {
  switch (in.op) {
    case Op::CALL:
      return depth - (in.arg + 2) + 1;
    case Op::CALL_FUNCTION_EX:
      return depth - (3 + (in.arg & 1)) + 1;
    case Op::POP_JUMP_IF_TRUE:
    case Op::POP_JUMP_IF_FALSE:
      return depth - 1;
    case Op::STORE_ATTR:
      return depth - 2;
    case Op::STORE_SUBSCR:
      return depth - 3;
    case Op::DELETE_SUBSCR:
      return depth - 2;
    case Op::BINARY_OP:
    case Op::COMPARE_OP:
    case Op::BINARY_SUBSCR:
      return depth - 1;
    case Op::LOAD_ATTR:
    case Op::GET_ITER:
      return depth;
    default:
      break;
  }
  EMBER_INTERNAL_ASSERT(false) << "no graph break at " << bytecode::op_name(in.op);
  return 0;
}

PyObject* tuple_of_strings(const std::vector<std::string>& v) {
  PyObject* t = PyTuple_New(static_cast<Py_ssize_t>(v.size()));
  for (size_t i = 0; i < v.size(); ++i) {
    PyTuple_SET_ITEM(t, static_cast<Py_ssize_t>(i), PyUnicode_FromString(v[i].c_str()));
  }
  return t;
}

/// Ops whose oparg is a localsplus slot.
bool is_local_op(Op op) {
  return op == Op::LOAD_FAST || op == Op::LOAD_FAST_CHECK || op == Op::LOAD_FAST_AND_CLEAR ||
         op == Op::STORE_FAST || op == Op::DELETE_FAST || op == Op::LOAD_DEREF ||
         op == Op::STORE_DEREF || op == Op::DELETE_DEREF || op == Op::LOAD_CLOSURE ||
         op == Op::MAKE_CELL;
}

/// The resume function continuing `bc` at instruction `target` with `depth` stack values, of
/// which the bottom `kept` are `stack`'s (a NULL among them is pushed by the resume function,
/// not passed) and the rest are passed; then the bound `locals`. `stop_pc`: where it stopped.
nb::object build_resume(PyCodeObject* co, PyObject* globals, const bytecode::Code& bc, int stop_pc,
                        const std::vector<nb::object>& stack, const std::vector<nb::object>& locals,
                        int target, int depth, int kept,
                        const std::vector<nb::object>& reenter = {}) {
  auto is_null = [&](int i) { return i < kept && !stack[static_cast<size_t>(i)].is_valid(); };
  auto entered = [&](int i) {
    return i < kept && static_cast<size_t>(i) < reenter.size() &&
           reenter[static_cast<size_t>(i)].is_valid();
  };
  std::vector<std::string> names;
  std::vector<int> new_slot(locals.size(), -1);
  for (int i = 0; i < depth; ++i) {
    if (!is_null(i) && !entered(i)) names.push_back("__ember_stack" + std::to_string(i));
  }
  const int passed = static_cast<int>(names.size());
  std::vector<int> bound;
  for (size_t j = 0; j < locals.size(); ++j) {
    if (locals[j].is_valid()) bound.push_back(static_cast<int>(j));
  }
  auto local_name = [&](size_t j) {
    return std::string(
        PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_localsplusnames, static_cast<Py_ssize_t>(j))));
  };
  for (int j : bound) {
    new_slot[static_cast<size_t>(j)] = static_cast<int>(names.size());
    names.push_back(local_name(static_cast<size_t>(j)));
  }
  for (size_t j = 0; j < locals.size(); ++j) {
    if (new_slot[j] < 0) {
      new_slot[j] = static_cast<int>(names.size());
      names.push_back(local_name(j));
    }
  }
  bytecode::Position pos = bc.instrs[static_cast<size_t>(target)].pos;
  bytecode::Code out;
  out.minor = bc.minor;
  // The frame's cell variables are cells again (their contents are arguments, or unbound).
  std::vector<std::string> cells;
  for (size_t j = 0; j < locals.size(); ++j) {
    if (is_cell_slot(co, static_cast<int>(j))) {
      out.instrs.push_back(make(Op::MAKE_CELL, new_slot[j], pos));
      cells.push_back(local_name(j));
    }
  }
  out.instrs.push_back(make(Op::RESUME, 0, pos));
  // A loop's iterator arrives as the list of what it had left (TemplateBuilder): iterate it.
  for (size_t j = 0; j < locals.size(); ++j) {
    if (locals[j].is_valid() && is_builtin_iterator(locals[j].ptr())) {
      out.instrs.push_back(make(Op::LOAD_FAST, new_slot[j], pos));
      out.instrs.push_back(make(Op::GET_ITER, 0, pos));
      out.instrs.push_back(make(Op::STORE_FAST, new_slot[j], pos));
    }
  }
  Consts consts(co->co_consts);
  for (int i = 0, arg = 0; i < depth; ++i) {
    if (is_null(i)) {
      out.instrs.push_back(make(Op::PUSH_NULL, 0, pos));
      continue;
    }
    if (entered(i)) {
      // The with block whose __exit__ is here, entered again (Note [Graph breaks inside with
      // blocks]): the copied body's exception table finds its __exit__ where it was.
      if (kNullBeforeCallable) out.instrs.push_back(make(Op::PUSH_NULL, 0, pos));
      out.instrs.push_back(make(Op::LOAD_CONST, consts.add(reenter[static_cast<size_t>(i)]), pos));
      if (!kNullBeforeCallable) out.instrs.push_back(make(Op::PUSH_NULL, 0, pos));
      out.instrs.push_back(make(Op::CALL, 0, pos));
      out.instrs.push_back(make(Op::BEFORE_WITH, 0, pos));
      out.instrs.push_back(make(Op::POP_TOP, 0, pos));
      continue;
    }
    out.instrs.push_back(make(Op::LOAD_FAST, arg++, pos));
    if (i < kept && is_builtin_iterator(stack[static_cast<size_t>(i)].ptr())) {
      out.instrs.push_back(make(Op::GET_ITER, 0, pos));
    }
  }
  const int prefix = static_cast<int>(out.instrs.size()) + 1;
  Instr jump = make(Op::JUMP, 0, pos);
  jump.target = target + prefix;
  out.instrs.push_back(jump);
  for (const Instr& orig : bc.instrs) {
    Instr in = orig;
    if (in.target >= 0) in.target += prefix;
    if (is_local_op(in.op)) in.arg = new_slot[static_cast<size_t>(in.arg)];
    if ((in.op == Op::RESUME && in.arg == 0) || orig.op == Op::MAKE_CELL) in.op = Op::NOP;
    out.instrs.push_back(in);
  }
  out.handlers = bc.handlers;
  for (auto& h : out.handlers) h.target += prefix;
  nb::object varnames = nb::steal(tuple_of_strings(names));
  nb::object cellvars = nb::steal(tuple_of_strings(cells));
  nb::object const_tuple = consts.tuple();
  bytecode::AssembleOptions opts;
  opts.consts = const_tuple.ptr();
  opts.varnames = varnames.ptr();
  opts.cellvars = cellvars.ptr();
  opts.argcount = passed + static_cast<int>(bound.size());
  opts.posonlyargcount = 0;
  opts.kwonlyargcount = 0;
  opts.flags = co->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  std::string name =
      std::string("__ember_resume_") + PyUnicode_AsUTF8(co->co_name) + "_at_" +
      std::to_string(pos.line >= 0 ? pos.line : bc.instrs[static_cast<size_t>(stop_pc)].pos.line);
  opts.name = name;
  opts.qualname = name;
  nb::object code = nb::steal(bytecode::assemble(out, co, opts));
  if (!code.is_valid()) throw nb::python_error();
  nb::object fn = nb::steal(PyFunction_New(code.ptr(), globals));
  if (!fn.is_valid()) throw nb::python_error();
  return fn;
}

/// Emits the break instruction `brk` (run by CPython), then for each continuation (one; two
/// for a conditional jump) a tail that returns resume(*stack, *locals): the `after` values on
/// the stack, then the locals in slots `local_slots`. Inside `withs` (entered by the code before,
/// their entries added), the instruction is covered by the innermost's handler; each tail
/// exits them, innermost first, and passes the stack without their __exit__s (the resume
/// function enters them again).
void emit_break_and_tails(bytecode::Code& out, Consts& consts, const Instr& brk, int after,
                          const std::vector<int>& local_slots,
                          const std::vector<nb::object>& resumes,
                          const std::vector<ReenteredWith>& withs = {}) {
  const bytecode::Position pos = brk.pos;
  Writer emit{out, pos, withs.empty() ? -1 : withs.back().handler};
  Instr again = brk;
  again.handler = emit.protect;
  out.instrs.push_back(again);
  const int jump_index = static_cast<int>(out.instrs.size()) - 1;
  auto tail = [&](nb::handle resume) {
    int first = static_cast<int>(out.instrs.size());
    for (size_t j = withs.size(); j-- > 0;) {
      emit_exit(emit, consts, withs[j], j > 0 ? &withs[j - 1] : nullptr);
    }
    emit.protect = -1;
    if (withs.empty()) {
      emit(Op::BUILD_TUPLE, after);
      for (int j : local_slots) emit(Op::LOAD_FAST, j);
      emit(Op::BUILD_TUPLE, static_cast<int>(local_slots.size()));
      emit(Op::BINARY_OP, 0);  // NB_ADD: stack values + locals
    } else {
      // A list of the stack values without the __exit__s, then the locals (CALL_FUNCTION_EX
      // takes any sequence).
      emit(Op::BUILD_LIST, after);
      for (size_t j = withs.size(); j-- > 0;) {
        emit(Op::COPY, 1);
        emit(Op::LOAD_CONST, consts.add_int(withs[j].position));
        emit(Op::DELETE_SUBSCR);
      }
      for (int j : local_slots) emit(Op::LOAD_FAST, j);
      emit(Op::BUILD_TUPLE, static_cast<int>(local_slots.size()));
      emit(Op::LIST_EXTEND, 1);
    }
    int fn = consts.add(resume);
    if (kNullBeforeCallable) {
      emit(Op::PUSH_NULL);
      emit(Op::SWAP, 2);
      emit(Op::LOAD_CONST, fn);
      emit(Op::SWAP, 2);
    } else {
      emit(Op::LOAD_CONST, fn);
      emit(Op::SWAP, 2);
      emit(Op::PUSH_NULL);
      emit(Op::SWAP, 2);
    }
    emit(Op::CALL_FUNCTION_EX, 0);
    emit(Op::RETURN_VALUE);
    return first;
  };
  tail(resumes[0]);
  if (resumes.size() > 1) out.instrs[static_cast<size_t>(jump_index)].target = tail(resumes[1]);
  emit_with_handlers(out, withs, pos);
}

/// The stack depth after the break instruction of a frame stopped with `depth` values, and how
/// many of them stay below its result; refuses a NULL among those (a resume function's
/// arguments can not be NULL).
std::pair<int, int> depth_after_break(const Instr& brk, const std::vector<nb::object>& stack) {
  const int after = depth_after(brk, static_cast<int>(stack.size()));
  const bool pushes =
      !(brk.op == Op::POP_JUMP_IF_TRUE || brk.op == Op::POP_JUMP_IF_FALSE ||
        brk.op == Op::STORE_ATTR || brk.op == Op::STORE_SUBSCR || brk.op == Op::DELETE_SUBSCR);
  const int kept = after - (pushes ? 1 : 0);
  for (int i = 0; i < kept; ++i) {
    EMBER_UNSUPPORTED(stack[static_cast<size_t>(i)].is_valid())
        << "a graph break with a pending call below it on the stack";
  }
  return {after, kept};
}

/// The resume functions after the break instruction of a frame stopped at `pc`.
std::vector<nb::object> break_resumes(PyCodeObject* co, PyObject* globals, const bytecode::Code& bc,
                                      int pc, const std::vector<nb::object>& stack,
                                      const std::vector<nb::object>& locals,
                                      const std::vector<nb::object>& reenter = {}) {
  const Instr& brk = bc.instrs[static_cast<size_t>(pc)];
  auto [after, kept] = depth_after_break(brk, stack);
  std::vector<nb::object> resumes;
  resumes.push_back(build_resume(co, globals, bc, pc, stack, locals, pc + 1, after, kept, reenter));
  if (brk.op == Op::POP_JUMP_IF_TRUE || brk.op == Op::POP_JUMP_IF_FALSE) {
    resumes.push_back(
        build_resume(co, globals, bc, pc, stack, locals, brk.target, after, kept, reenter));
  }
  return resumes;
}

/// The transformed code of frame `co` (it takes the frame's arguments): `out` over the frame's
/// first `num_locals` localsplus names, then `extra` new locals, with `consts` appended.
nb::object assemble_transformed(PyCodeObject* co, const bytecode::Code& out, const Consts& consts,
                                size_t num_locals, const std::vector<std::string>& extra) {
  std::vector<std::string> names;
  for (size_t j = 0; j < num_locals; ++j) {
    names.emplace_back(
        PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_localsplusnames, static_cast<Py_ssize_t>(j))));
  }
  names.insert(names.end(), extra.begin(), extra.end());
  nb::object varnames = nb::steal(tuple_of_strings(names));
  nb::object const_tuple = consts.tuple();
  bytecode::AssembleOptions opts;
  opts.consts = const_tuple.ptr();
  opts.varnames = varnames.ptr();
  opts.argcount = num_arg_slots(co);
  opts.posonlyargcount = 0;
  opts.kwonlyargcount = 0;
  opts.flags = co->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  nb::object code = nb::steal(bytecode::assemble(out, co, opts));
  if (!code.is_valid()) throw nb::python_error();
  return code;
}

/// The name of a function made from `co` for a break at `line`.
std::string generated_name(const char* what, PyCodeObject* co, int line) {
  return std::string(what) + PyUnicode_AsUTF8(co->co_name) + "_at_" + std::to_string(line);
}

/// The innermost frame of a nested break, as a function of its stack (NULLs pushed, not passed)
/// and bound locals: runs the break instruction, then returns what the resume function after it
/// returns (the frame's return value). It is made from the frame's own code object (its names
/// and constants) and must run as it is: `generated` receives its code.
nb::object build_trampoline(const FrameState& s, BreakCode& result) {
  PyCodeObject* co = reinterpret_cast<PyCodeObject*>(s.code.ptr());
  const bytecode::Code& bc = *decoded(co);
  const Instr& brk = bc.instrs[static_cast<size_t>(s.pc)];
  const int after = depth_after_break(brk, s.stack).first;
  std::vector<nb::object> resumes =
      break_resumes(co, s.globals.ptr(), bc, s.pc, s.stack, s.locals, s.reenter);
  std::vector<std::string> names;
  for (size_t i = 0; i < s.stack.size(); ++i) {
    if (s.stack[i].is_valid() && !reentered(s.reenter, i)) {
      names.push_back("__ember_stack" + std::to_string(i));
    }
  }
  std::vector<int> local_slots;
  for (size_t j = 0; j < s.locals.size(); ++j) {
    if (!s.locals[j].is_valid()) continue;
    local_slots.push_back(static_cast<int>(names.size()));
    names.emplace_back(
        PyUnicode_AsUTF8(PyTuple_GET_ITEM(co->co_localsplusnames, static_cast<Py_ssize_t>(j))));
  }
  const int passed = static_cast<int>(names.size());
  bytecode::Code out;
  out.minor = bc.minor;
  // The with blocks around the break (Note [Graph breaks inside with blocks]): entered again
  // as the stack is pushed, their __exit__s also in locals after the arguments.
  std::vector<ReenteredWith> withs = reentered_withs(out, s.reenter, 0, passed);
  add_exit_names(names, withs.size());
  Consts consts(co->co_consts);
  Writer emit{out, brk.pos};
  emit(Op::RESUME, 0);
  for (size_t i = 0, arg = 0, entered = 0; i < s.stack.size(); ++i) {
    if (!s.stack[i].is_valid()) {
      emit(Op::PUSH_NULL);
    } else if (reentered(s.reenter, i)) {
      emit_reenter(emit, consts, s.reenter[i], withs[entered++]);
    } else {
      emit(Op::LOAD_FAST, static_cast<int>(arg++));
    }
  }
  emit_break_and_tails(out, consts, brk, after, local_slots, resumes, withs);
  nb::object varnames = nb::steal(tuple_of_strings(names));
  nb::object none = nb::steal(PyTuple_New(0));
  nb::object const_tuple = consts.tuple();
  bytecode::AssembleOptions opts;
  opts.consts = const_tuple.ptr();
  opts.varnames = varnames.ptr();
  opts.cellvars = none.ptr();
  opts.freevars = none.ptr();
  opts.argcount = passed;
  opts.posonlyargcount = 0;
  opts.kwonlyargcount = 0;
  opts.flags = co->co_flags & ~(CO_VARARGS | CO_VARKEYWORDS);
  std::string name = generated_name("__ember_break_", co, brk.pos.line);
  opts.name = name;
  opts.qualname = name;
  nb::object code = nb::steal(bytecode::assemble(out, co, opts));
  if (!code.is_valid()) throw nb::python_error();
  nb::object fn = nb::steal(PyFunction_New(code.ptr(), s.globals.ptr()));
  if (!fn.is_valid()) throw nb::python_error();
  result.generated.push_back(code);
  for (auto& r : resumes) result.resumes.push_back(r);
  return fn;
}

/// build_break_code for a nested stop: the segment, then the innermost frame's trampoline, then
/// each caller's resume function after its CALL with the callee's return value, innermost
/// caller first; the top frame returns what its own resume function returns.
BreakCode build_nested_break_code(PyCodeObject* co, PyObject* globals, const bytecode::Code& bc,
                                  const StopState& state, nb::handle segment) {
  std::vector<FrameState> levels;
  levels.push_back(FrameState{nb::borrow(reinterpret_cast<PyObject*>(co)), nb::borrow(globals),
                              state.pc, state.stack, state.locals, state.reenter});
  for (const FrameState& s : state.inner) levels.push_back(s);
  BreakCode result;
  nb::object trampoline = build_trampoline(levels.back(), result);
  std::vector<nb::object> continuations(levels.size());
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    const FrameState& s = levels[i];
    auto* c = reinterpret_cast<PyCodeObject*>(s.code.ptr());
    const int below = static_cast<int>(s.stack.size());
    continuations[i] = build_resume(c, s.globals.ptr(), *decoded(c), s.pc, s.stack, s.locals,
                                    s.pc + 1, below + 1, below, s.reenter);
    result.resumes.push_back(continuations[i]);
  }
  continuations.back() = trampoline;
  // Each level's values in the segment's tuple (state_templates' order).
  std::vector<int> first(levels.size());
  for (size_t i = 0, k = 0; i < levels.size(); ++i) {
    first[i] = static_cast<int>(k);
    for (size_t j = 0; j < levels[i].stack.size(); ++j) {
      k += levels[i].stack[j].is_valid() && !reentered(levels[i].reenter, j) ? 1 : 0;
    }
    for (const auto& v : levels[i].locals) k += v.is_valid() ? 1 : 0;
  }

  const bytecode::Position pos = bc.instrs[static_cast<size_t>(state.pc)].pos;
  const int nargs = num_arg_slots(co);
  const int tmp = static_cast<int>(state.locals.size());
  const int ret = tmp + 1;
  Consts consts(co->co_consts);
  bytecode::Code out;
  out.minor = bc.minor;
  // The callers' with blocks around the calls they wait at (Note [Graph breaks inside with
  // blocks]; the innermost frame's are its trampoline's): entered again after the segment, outer
  // level first, their __exit__s at the bottom of this code's stack while the chain of calls
  // runs; a level's are exited before its resume function, which enters them again.
  std::vector<nb::object> factories;
  std::vector<size_t> level_end(levels.size(), 0);
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    for (const nb::object& f : levels[i].reenter) {
      if (f.is_valid()) factories.push_back(f);
    }
    level_end[i] = factories.size();
  }
  std::vector<ReenteredWith> withs = reentered_withs(out, factories, 0, ret + 1);
  std::vector<std::string> extra_locals = {"__ember_tmp", "__ember_ret"};
  add_exit_names(extra_locals, withs.size());
  Writer emit{out, pos};
  auto push_callable = [&](nb::handle fn) {
    if (kNullBeforeCallable) emit(Op::PUSH_NULL);
    emit(Op::LOAD_CONST, consts.add(fn));
    if (!kNullBeforeCallable) emit(Op::PUSH_NULL);
  };
  auto push_item = [&](int k) {
    emit(Op::LOAD_FAST, tmp);
    emit(Op::LOAD_CONST, consts.add_int(k));
    emit(Op::BINARY_SUBSCR);
  };
  emit(Op::RESUME, 0);
  push_callable(segment);
  for (int i = 0; i < nargs; ++i) emit(Op::LOAD_FAST, i);
  emit(Op::CALL, nargs);
  emit(Op::STORE_FAST, tmp);
  for (size_t j = 0; j < withs.size(); ++j) emit_reenter(emit, consts, factories[j], withs[j]);
  for (size_t i = levels.size(); i-- > 0;) {
    const FrameState& s = levels[i];
    const bool innermost = i + 1 == levels.size();
    if (!innermost) {
      // This level's blocks, innermost first: the top of the stack by now.
      const size_t begin = i > 0 ? level_end[i - 1] : 0;
      for (size_t j = level_end[i]; j-- > begin;) {
        emit_exit(emit, consts, withs[j], j > 0 ? &withs[j - 1] : nullptr);
        emit(Op::POP_TOP);
      }
    }
    push_callable(continuations[i]);
    int k = first[i];
    int argc = 0;
    for (size_t j = 0; j < s.stack.size(); ++j) {
      if (!s.stack[j].is_valid() || reentered(s.reenter, j)) continue;
      push_item(k++);
      ++argc;
    }
    if (!innermost) {
      emit(Op::LOAD_FAST, ret);
      ++argc;
    }
    for (const auto& v : s.locals) {
      if (!v.is_valid()) continue;
      push_item(k++);
      ++argc;
    }
    emit(Op::CALL, argc);
    emit(i == 0 ? Op::RETURN_VALUE : Op::STORE_FAST, i == 0 ? 0 : ret);
  }

  emit_with_handlers(out, withs, pos);
  result.code = assemble_transformed(co, out, consts, state.locals.size(), extra_locals);
  return result;
}

}  // namespace

std::vector<OutputTemplate> state_templates(const StopState& state, const Interpreter& interp,
                                            std::vector<at::Tensor>& tensors,
                                            std::vector<AttrStore>& stores, IteratorRests& rests,
                                            bool inputs_as_sources) {
  TemplateBuilder b{interp, tensors, {}, {}};
  std::vector<OutputTemplate> out;
  b.iterators_as_lists = true;
  b.inputs_as_sources = inputs_as_sources;
  b.rests = &rests;
  for (size_t i = 0; i < state.stack.size(); ++i) {
    if (state.stack[i].is_valid() && !reentered(state, i)) out.push_back(b.of(state.stack[i]));
  }
  for (const nb::object& v : state.locals) {
    if (v.is_valid()) out.push_back(b.of(v));
  }
  for (const FrameState& level : state.inner) {
    for (size_t i = 0; i < level.stack.size(); ++i) {
      if (level.stack[i].is_valid() && !reentered(level.reenter, i)) {
        out.push_back(b.of(level.stack[i]));
      }
    }
    for (const nb::object& v : level.locals) {
      if (v.is_valid()) out.push_back(b.of(v));
    }
  }
  b.iterators_as_lists = false;
  stores = b.stores();
  return out;
}

OutputTemplate value_template(nb::handle v, const Interpreter& interp,
                              std::vector<at::Tensor>& tensors, std::vector<AttrStore>& stores) {
  TemplateBuilder b{interp, tensors, {}, {}};
  OutputTemplate t = b.of(v);
  stores = b.stores();
  return t;
}

nb::object make_segment_callable(std::shared_ptr<Segment> segment) {
  auto* holder = new std::shared_ptr<Segment>(std::move(segment));
  nb::object capsule = nb::steal(PyCapsule_New(holder, "ember.segment", &segment_free));
  if (!capsule.is_valid()) {
    delete holder;
    throw nb::python_error();
  }
  nb::object fn = nb::steal(PyCFunction_New(&segment_def, capsule.ptr()));
  if (!fn.is_valid()) throw nb::python_error();
  return fn;
}

BreakCode build_break_code(PyCodeObject* co, PyObject* globals, const bytecode::Code& bc,
                           const StopState& state, nb::handle segment) {
  if (!state.inner.empty()) return build_nested_break_code(co, globals, bc, state, segment);
  const Instr& brk = bc.instrs[static_cast<size_t>(state.pc)];
  const bytecode::Position pos = brk.pos;
  const int after = depth_after_break(brk, state.stack).first;
  BreakCode result;
  result.resumes =
      break_resumes(co, globals, bc, state.pc, state.stack, state.locals, state.reenter);

  const int nargs = num_arg_slots(co);
  const int tmp = static_cast<int>(state.locals.size());  // a new local after the others
  Consts consts(co->co_consts);
  const int segment_const = consts.add(segment);
  bytecode::Code out;
  out.minor = bc.minor;
  // The with blocks the break is inside, entered again as the stack is rebuilt (Note [Graph
  // breaks inside with blocks]); each __exit__ also kept in a local of its own.
  std::vector<ReenteredWith> withs = reentered_withs(out, state.reenter, 0, tmp + 1);
  EMBER_INTERNAL_ASSERT(withs.empty() || brk.handler >= 0)
      << "a with block's __exit__ outside its block";
  std::vector<std::string> extra_locals = {"__ember_tmp"};
  add_exit_names(extra_locals, withs.size());
  Writer emit{out, pos};
  emit(Op::RESUME, 0);
  if (kNullBeforeCallable) emit(Op::PUSH_NULL);
  emit(Op::LOAD_CONST, segment_const);
  if (!kNullBeforeCallable) emit(Op::PUSH_NULL);
  for (int i = 0; i < nargs; ++i) emit(Op::LOAD_FAST, i);
  emit(Op::CALL, nargs);
  emit(Op::STORE_FAST, tmp);
  int k = 0;
  size_t entered = 0;
  for (size_t i = 0; i < state.stack.size(); ++i) {
    const nb::object& v = state.stack[i];
    if (!v.is_valid()) {
      emit(Op::PUSH_NULL);
      continue;
    }
    if (reentered(state, i)) {
      emit_reenter(emit, consts, state.reenter[i], withs[entered++]);
      continue;
    }
    emit(Op::LOAD_FAST, tmp);
    emit(Op::LOAD_CONST, consts.add_int(k++));
    emit(Op::BINARY_SUBSCR);
  }
  std::vector<int> bound;
  for (size_t j = 0; j < state.locals.size(); ++j) {
    if (state.locals[j].is_valid()) {
      bound.push_back(static_cast<int>(j));
      emit(Op::LOAD_FAST, tmp);
      emit(Op::LOAD_CONST, consts.add_int(k++));
      emit(Op::BINARY_SUBSCR);
      emit(Op::STORE_FAST, static_cast<int>(j));
    } else if (static_cast<int>(j) < nargs) {
      emit(Op::DELETE_FAST, static_cast<int>(j));
    }
  }
  emit(Op::DELETE_FAST, tmp);
  emit_break_and_tails(out, consts, brk, after, bound, result.resumes, withs);

  result.code = assemble_transformed(co, out, consts, state.locals.size(), extra_locals);
  return result;
}

}  // namespace ember::capture
