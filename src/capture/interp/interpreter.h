/// \file
/// The symbolic interpreter: runs a frame's normalised bytecode (bytecode/instruction.h) at
/// capture time, with tensors replaced by tracer tensors, so that every tensor operation is
/// recorded by a TraceSession as an ATen node.
///
/// The model. Values on the interpreter's stack are real Python objects: tracer tensors, objects
/// the frame reads (modules, functions, constants), and containers the interpreter builds. What
/// makes it symbolic is bookkeeping around them:
///  - every value read from outside the frame (its arguments and free variables, globals,
///    builtins, attributes and items of those) gets a Source (source.h) and a guard (guards.h):
///    tensors become graph inputs (TensorMatch), constants are guarded by value (Equals),
///    other objects by identity (IdMatch), containers by type and length with their items
///    read one by one;
///  - user functions and nn.Module forwards are inlined (interpreted, not called);
///  - torch functions, Tensor methods and an allow-list of builtins run for real on tracer
///    tensors and on the interpreter's own values;
///  - objects the frame did not create are never mutated: a store into one is unsupported.
/// Anything else (an unknown opcode or callable, control flow on tensor data, a side effect)
/// throws ember::Unsupported with the reason and the source line. An exception the program
/// itself raises propagates as a Python error (nanobind::python_error).
#pragma once

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <nanobind/nanobind.h>

#include <array>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "capture/bytecode/instruction.h"
#include "capture/bytecode/opcode_table.h"
#include "capture/guards/guards.h"
#include "capture/guards/source.h"
#include "capture/hook/frame_hook.h"
#include "support/error.h"
#include "tracer/grad_inputs.h"
#include "tracer/trace_session.h"

namespace ember::capture {

/// Thrown by Interpreter::run when a frame meets what it cannot capture at instruction `pc`,
/// where a graph break may be taken: the frame can resume after that instruction (the
/// instruction is not inside a try block, the frame has no free variables and no function it
/// made closes over its cells, the instruction is one whose stack effect the break code knows).
///
/// In the top frame the caller re-runs the capture with stop_at = pc. Inside inlined calls the
/// break is nested (`nested()`) when every caller up to the top frame is waiting at a plain
/// CALL whose result is the callee's return value, under the same conditions; the caller then
/// re-runs the capture to stop after `count()` instructions, with every frame's state
/// (StopState::inner). Otherwise the break is at the top frame's CALL.
class GraphBreak : public Unsupported {
 public:
  GraphBreak(const std::string& reason, int pc, bool data_dependent, int64_t count = -1)
      : Unsupported(reason), pc_(pc), data_dependent_(data_dependent), count_(count) {}
  int pc() const { return pc_; }
  /// The reason is a read of tensor data (.item(), a tensor used as a bool).
  bool data_dependent() const { return data_dependent_; }
  bool nested() const { return count_ >= 0; }
  /// Instructions interpreted before the one that breaks (a nested break).
  int64_t count() const { return count_; }

 private:
  int pc_;
  bool data_dependent_;
  int64_t count_;
};

/// Thrown when the frame is to run eagerly for this call only and be captured again on the next:
/// what it reads is made by running it (an optimizer's first step creates its state: `state[p]`
/// of a defaultdict with no entry for `p`). Never a graph break: it ends the whole capture.
class EagerThisCall : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

/// Thrown where the frame must run eagerly with the hook off for the frames it calls: a
/// higher-order op (torch.cond, ...) whose eager implementation compiles its branches with
/// Dynamo, whose own frame evaluation must not meet ember's. Never a graph break: the whole frame
/// runs eagerly, unhooked (remembered for the global state; fullgraph raises).
class RunsUnhooked : public Unsupported {
 public:
  using Unsupported::Unsupported;
};

/// One frame's state where the interpreter stopped.
struct FrameState {
  nanobind::object code;     ///< the code object
  nanobind::object globals;  ///< its globals
  int pc = -1;               ///< the instruction it stopped before; a caller: the CALL it waits at
  std::vector<nanobind::object> stack;   ///< null entries are NULL; a caller's: below the call
  std::vector<nanobind::object> locals;  ///< null entries are unbound; a cell: its contents
  /// As StopState::reenter, for this frame's stack.
  std::vector<nanobind::object> reenter;
};

/// The top frame's state when the interpreter stopped before instruction `pc` (stop_at); for a
/// nested stop, the CALL it waits at, and the inlined frames below it, outermost first.
struct StopState {
  int pc = -1;
  std::vector<nanobind::object> stack;   ///< null entries are NULL
  std::vector<nanobind::object> locals;  ///< null entries are unbound; a cell: its contents
  std::vector<FrameState> inner;
  /// Parallel to `stack` (or empty): where the stack holds the `__exit__` of a with block the
  /// break is inside, a callable making a new context manager of the same state, which the
  /// break's code enters again (Note [Graph breaks inside with blocks]).
  std::vector<nanobind::object> reenter;
};

/// Whether `msg` is PyTorch's error for reading the data of a tensor without storage (a tracer
/// tensor: .tolist(), .numpy(), data_ptr()).
bool reads_tensor_data(const std::string& msg);

/// Whether localsplus slot `i` of `co` is a cell variable (CO_FAST_CELL).
bool is_cell_slot(PyCodeObject* co, int i);

/// The localsplus slots that hold arguments: positional, keyword-only, *args, **kwargs.
int num_arg_slots(PyCodeObject* co);

/// Whether `co`'s file starts with one of `prefixes`.
bool in_files(PyCodeObject* co, const std::vector<std::string>& prefixes);

struct InterpreterOptions {
  int max_inline_depth = 32;
  /// co_filename prefixes of code that runs for real instead of being inlined (torch, the
  /// standard library). Inlined: everything else.
  std::vector<std::string> library_prefixes;
  /// The dims of a tensor input (source name, value, kind) that become shape symbols; unset:
  /// none (static shapes).
  std::function<std::vector<int64_t>(const std::string&, const at::Tensor&, graph::InputKind)>
      dynamic_dims;
  /// Graph breaks at DistributedDataParallel bucket boundaries (Note [DDP bucket boundaries]).
  bool ddp_bucket_boundaries = true;
};

/// How the reason of a graph break at a DDP bucket boundary begins.
inline constexpr std::string_view kDdpBucketBoundary = "a DistributedDataParallel bucket boundary";

class Interpreter {
 public:
  Interpreter(tracer::TraceSession& session, SourceTable& sources, GuardSet& guards,
              InterpreterOptions options);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  /// Interprets frame `f` to its return value (tracer tensors in place of tensors). The trace
  /// session must be entered. With `stop_at` >= 0, stops when the top frame is about to run
  /// instruction `stop_at` and returns None; stop_state() then holds the frame's state. With
  /// `stop_count` >= 0, stops likewise after that many instructions, inside inlined calls (a
  /// nested GraphBreak's count()).
  nanobind::object run(const FrameView& f, int stop_at = -1, int64_t stop_count = -1);
  const StopState& stop_state() const { return stop_; }

  /// Whether `v` was created by the frame (a container it built, a cell, a function).
  bool created_here(nanobind::handle v) const { return is_fresh(v); }
  /// The source `v` was read from, or -1. For the frame's copy of a list, tuple or dict read
  /// from a source, that source.
  int source_of_value(nanobind::handle v) const {
    int s = source_of(v);
    if (s >= 0) return s;
    auto it = copy_source_.find(v.ptr());
    return it == copy_source_.end() ? -1 : it->second;
  }

  /// The source of the graph input whose tracer tensor is `v`, or -1.
  int input_source_of(nanobind::handle v) const {
    auto real = real_of_.find(v.ptr());
    return real == real_of_.end() ? -1 : tensor_source_.at(real->second);
  }

  /// A store to an attribute of an object from outside the frame (side_effects.h): done for
  /// real while the interpreter runs, undone when it stops.
  struct Store {
    nanobind::object obj;
    nanobind::object name;
    nanobind::object original;  ///< the instance dict's entry before the first store, or null
    nanobind::object value;     ///< the last value stored
    int source = -1;            ///< the object's source
  };
  const std::vector<Store>& stores() const { return stores_; }

  /// The frame's copies of lists and dicts from outside it that it mutated, with the source of
  /// each original: the compiled frame writes each copy's final items back into the original
  /// (side_effects.h).
  const std::vector<std::pair<nanobind::object, int>>& mutated_containers() const {
    return mutated_containers_;
  }

  /// The trace this interpreter records into.
  const tracer::TraceSession& session() const { return session_; }
  /// The source each graph input reads, in input order.
  const std::vector<int>& input_sources() const { return input_sources_; }
  /// Per shape symbol of the trace (by id): the tensor source and dim it is the size of.
  const std::vector<std::pair<int, int64_t>>& symbol_sources() const { return symbol_sources_; }
  /// Graph inputs that require grad under grad mode (tracer tensors that autograd records on),
  /// and their positions among input_sources(): the joint graph differentiates the outputs
  /// with respect to them (capture_compiler.cpp).
  const tracer::GradInputs& grad_tracers() const { return grad_tracers_; }
  const std::vector<int>& grad_tracer_inputs() const { return grad_tracer_inputs_; }
  /// Number of instructions interpreted and functions inlined (for logs).
  int64_t instructions() const { return instructions_; }
  int64_t inlined_calls() const { return inlined_calls_; }

  /// "file:line (function)" of the instruction being interpreted, innermost frame first.
  std::string location() const;

  struct Frame;

  /// The names of the ops the interpreter handles (op_table()'s entries that are not
  /// op_unsupported), in ops.def order. For tests.
  static std::vector<std::string> handled_ops();
  /// The names of the kinds of callables of the call policy, in the order they are tried
  /// (call_kinds()). For tests.
  static std::vector<std::string> call_kind_names();

 private:
  /// What an instruction tells the loop: the frame returned `value`.
  struct StepResult {
    bool returned = false;
    nanobind::object value;
  };
  /// An opcode's handler: runs one instruction (op_table()).
  using OpHandler = void (Interpreter::*)(Frame&, const bytecode::Instr&, StepResult&);

  // interpreter.cpp: the loop (run, run_frame) and truth values.
  nanobind::object run_frame(Frame& fr);
  /// Whether a function the interpreter made closes over a cell of `fr`.
  bool cells_captured(const Frame& fr) const;
  /// Whether the innermost frame `fr` can take a nested graph break at `in` (GraphBreak).
  bool nestable(const Frame& fr, const bytecode::Instr& in) const;
  /// Records every frame's state in stop_ (a nested stop).
  void record_nested_stop();
  /// Whether every block around `in` of the top frame `fr` is a with block the break's code
  /// can enter again (Note [Graph breaks inside with blocks]); true outside any block.
  bool withs_resumable(const Frame& fr, const bytecode::Instr& in) const;
  /// Grad mode that entering the with blocks open in the frames being interpreted again, from
  /// the top frame's entry mode, gives.
  bool grad_of_withs() const;
  /// Parallel to `fr`'s stack: the factory of each with block's `__exit__` on it (else null).
  std::vector<nanobind::object> reentries_of(const Frame& fr) const;
  /// For a with block's `__exit__` that the interpreter pushed: the factory of an equal
  /// context manager, or null.
  nanobind::handle reentry_factory(nanobind::handle exit) const;
  /// The factory of a context manager the interpreter enters for real that makes an equal one
  /// (its type, or a functools.partial of it), or null.
  nanobind::object reentry_of(nanobind::handle mgr) const;

  // op_table.cpp: one handler per Op, in a table generated from ops.def (OpHandler). A handler
  // runs one instruction of frame `fr`; the handlers of RETURN_VALUE and RETURN_CONST set `out`.
  // Handlers named after an op handle that op; lower-case ones a family of ops.
  /// Runs `in` through its entry of op_table().
  void step(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// Per Op (in ops.def order): its handler, or op_unsupported.
  static const std::array<OpHandler, bytecode::kNumOps>& op_table();
  /// An op the interpreter does not handle: Unsupported ("the instruction X at ...").
  void op_unsupported(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// NOP, RESUME, CACHE, EXTENDED_ARG, PRECALL, KW_NAMES: nothing to do.
  void op_nothing(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // interpreter_flow.cpp: the stack, jumps, loops, returns and generators.
  void op_POP_TOP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_PUSH_NULL(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_COPY(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_SWAP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_RETURN_VALUE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_RETURN_CONST(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// JUMP, JUMP_FORWARD, JUMP_BACKWARD, JUMP_BACKWARD_NO_INTERRUPT, JUMP_NO_INTERRUPT.
  void op_jump(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// POP_JUMP_IF_TRUE, POP_JUMP_IF_FALSE.
  void op_pop_jump_if_bool(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// POP_JUMP_IF_NONE, POP_JUMP_IF_NOT_NONE.
  void op_pop_jump_if_none(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// JUMP_IF_TRUE_OR_POP, JUMP_IF_FALSE_OR_POP (3.11).
  void op_jump_if_or_pop(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_TO_BOOL(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_GET_ITER(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_FOR_ITER(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_END_FOR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_GET_YIELD_FROM_ITER(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_SEND(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_END_SEND(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_RETURN_GENERATOR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_YIELD_VALUE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // interpreter_operators.cpp: operators on plain values.
  void op_BINARY_OP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// UNARY_NEGATIVE, UNARY_INVERT, UNARY_NOT, UNARY_POSITIVE (3.11).
  void op_unary(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_CALL_INTRINSIC_1(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_COMPARE_OP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_IS_OP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_CONTAINS_OP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // interpreter_loads.cpp: constants, locals, cells, globals, attributes, subscripts, imports.
  void op_LOAD_CONST(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// LOAD_FAST, LOAD_FAST_CHECK.
  void op_load_fast(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_FAST_AND_CLEAR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_MAKE_CELL(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_COPY_FREE_VARS(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_CLOSURE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_DEREF(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_GLOBAL(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_ATTR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_METHOD(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_SUPER_ATTR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_BINARY_SUBSCR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_BINARY_SLICE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_IMPORT_NAME(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_IMPORT_FROM(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // interpreter_stores.cpp: locals, cells, attributes, items and slices.
  void op_STORE_FAST(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_DELETE_FAST(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_STORE_DEREF(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_STORE_ATTR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_STORE_SUBSCR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_STORE_SLICE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_DELETE_SUBSCR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // interpreter_data.cpp: building and taking apart Python values. Objects that become set
  // members or dict keys are hashed by identity: pinned.
  void op_BUILD_SLICE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// BUILD_TUPLE, BUILD_LIST, BUILD_SET.
  void op_build_sequence(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_BUILD_MAP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_BUILD_CONST_KEY_MAP(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_BUILD_STRING(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LIST_APPEND(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_SET_ADD(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LIST_EXTEND(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_SET_UPDATE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  /// DICT_UPDATE, DICT_MERGE.
  void op_dict_update(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_MAP_ADD(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LIST_TO_TUPLE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_UNPACK_SEQUENCE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_UNPACK_EX(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_FORMAT_VALUE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // interpreter_exceptions.cpp: raise, except clauses and with blocks.
  void op_PUSH_EXC_INFO(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_POP_EXCEPT(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_CHECK_EXC_MATCH(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_RERAISE(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_RAISE_VARARGS(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_LOAD_ASSERTION_ERROR(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_BEFORE_WITH(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_WITH_EXCEPT_START(Frame& fr, const bytecode::Instr& in, StepResult& out);
  // call_policy.cpp: calls and the functions the frame makes.
  void op_CALL(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_CALL_FUNCTION_EX(Frame& fr, const bytecode::Instr& in, StepResult& out);
  void op_MAKE_FUNCTION(Frame& fr, const bytecode::Instr& in, StepResult& out);

  /// Whether `e` was raised by the program (not ember's error, nor a read of traced data).
  bool is_program_exception(nanobind::python_error& e) const;
  /// Jumps to the handler of `in` (which has one) with `e` on the stack, as CPython does.
  void catch_exception(Frame& fr, const bytecode::Instr& in, nanobind::python_error& e);
  /// `exc`, or an instance of it if it is an exception class.
  nanobind::object exception_instance(nanobind::object exc);
  /// Whether a with block over `mgr` enters it for real (grad mode managers, nullcontext,
  /// torch.autocast, torch's own torch-function modes).
  bool enters_for_real(nanobind::handle mgr) const;
  /// Whether `mgr` is a TorchFunctionMode of torch's own (Note [torch's own torch-function
  /// modes]), entered for real.
  bool is_torch_function_mode_of_torch(nanobind::handle mgr) const;
  /// Whether `mgr` is a torch.inference_mode() object (entered as no_grad).
  bool is_inference_mode(nanobind::handle mgr) const;
  nanobind::object load_global(Frame& fr, PyObject* name);
  /// A comprehension's iterator argument `v` (slot `slot` of `co`) as a fresh iterator over its
  /// rest, read through an IterRest source (Note [A comprehension's iterator]); invalid when
  /// `v` is not one.
  nanobind::object comprehension_iterator(PyCodeObject* co, int slot, PyObject* v);
  nanobind::object load_attr(nanobind::handle obj, PyObject* name);
  nanobind::object load_deref(Frame& fr, int slot);
  /// STORE_ATTR and setattr(): on an object the frame made, directly or through its class's
  /// __setattr__ (inlined); on another, store_attr_outside.
  void store_attr(nanobind::handle obj, PyObject* name, nanobind::handle value);
  /// copy.deepcopy(v) of plain data (plain_data.h): copied for real, the copy is the frame's;
  /// v's state is guarded unless the frame made all of it.
  nanobind::object deep_copy(nanobind::handle v);
  /// STORE_ATTR on an object the frame did not make (side_effects.h).
  void store_attr_outside(nanobind::handle obj, PyObject* name, nanobind::handle value);
  const Store* find_store(nanobind::handle obj, PyObject* name) const;
  void undo_stores();
  nanobind::object subscr(nanobind::handle obj, nanobind::handle key);
  /// `obj`[key] where `obj` is a dict from outside the frame and `key` a graph input's tracer
  /// tensor: the entry of the real tensor, read through an ItemOf source. Null when it is not
  /// such a lookup.
  nanobind::object tensor_keyed_item(nanobind::handle obj, nanobind::handle key);
  bool truth(nanobind::handle v);

  // interpreter_values.cpp: sources, guards, graph inputs and freshness.
  /// Registers `v`, read from `source`: installs its guard and returns what the frame sees (a
  /// tracer tensor for a tensor, a wrapped copy for a list, tuple or dict).
  nanobind::object wrap(nanobind::handle v, int source);
  int source_of(nanobind::handle v) const;
  /// `v`, the attribute `name` of `obj`, an object the frame made: wrapped with a source through
  /// its class when the class holds it (a method's function, a class attribute).
  nanobind::object class_attr_of_fresh(nanobind::handle obj, PyObject* name, nanobind::object v);
  /// A tracer tensor standing for the real tensor `real_tensor` as a constant of the graph.
  nanobind::object constant_tensor(nanobind::handle real_tensor);
  /// `key` for indexing the tensor `tensor`, with its lists of ints or bools made constant index
  /// tensors (what tensor indexing would make of them for real).
  nanobind::object tensor_index(nanobind::handle tensor, nanobind::handle key);
  /// An object guarded by type only (see wrap) whose identity the trace now depends on (`is`,
  /// `in`, a key, id() or hash()): guarded by identity from here on.
  void pin_identity(nanobind::handle v);
  void pin_identities(const std::vector<nanobind::object>& values);
  /// Whether `v` is the frame's copy of a list or dict from outside it (wrap); if so, the frame
  /// may mutate it, and it is recorded to be written back (mutated_containers()).
  bool mutates_outside(nanobind::handle v);
  nanobind::object fresh(nanobind::object v);  ///< marks a value the frame created
  bool is_fresh(nanobind::handle v) const;
  /// The items of an nn.ModuleList, Sequential or ParameterList read from a source, each
  /// wrapped with its item source (and the container's length guarded). False for others.
  bool materialize(nanobind::handle v, std::vector<nanobind::object>& items);
  /// `v`, or for an nn container read from a source, a new list of its wrapped modules.
  nanobind::object materialized(nanobind::object v);
  /// The items of `v` for unpacking (a plain value, one the frame made, or an nn container).
  std::vector<nanobind::object> unpack_items(nanobind::handle v);

  // call_policy.cpp: the call policy. A call is handled by the first kind in call_kinds() whose
  // predicate matches the callable; each kind's handler is in the file of its concept.
  /// A kind's handler: the call's result.
  using CallHandler = nanobind::object (Interpreter::*)(nanobind::handle callable,
                                                        std::vector<nanobind::object> args,
                                                        nanobind::handle kwnames);
  struct CallKind {
    const char* name;                   ///< for messages and tests
    bool (*matches)(nanobind::handle);  ///< whether the callable is of this kind
    CallHandler handler;
  };
  /// The kinds of callables, in the order they are tried.
  static const std::vector<CallKind>& call_kinds();
  nanobind::object call(nanobind::handle callable, std::vector<nanobind::object> args,
                        nanobind::handle kwnames);
  /// call() for frame `fr`'s CALL instruction: a function inlined for it is a passthrough frame.
  nanobind::object call_from(Frame& fr, nanobind::handle callable,
                             std::vector<nanobind::object> args, nanobind::handle kwnames);
  /// A callable of no kind: Unsupported.
  nanobind::object call_unsupported(nanobind::handle callable);
  /// Calls `callable` for real. `pin`: objects guarded by type among its arguments (and its
  /// bound self) are pinned (pin_identity), since the call reads them unguarded; false only
  /// where what it reads is guarded otherwise or depends on the type alone.
  nanobind::object call_real(nanobind::handle callable, std::vector<nanobind::object> args,
                             nanobind::handle kwnames, bool pin = true);
  // call_function.cpp: Python functions and bound methods, inlining.
  nanobind::object call_method(nanobind::handle callable, std::vector<nanobind::object> args,
                               nanobind::handle kwnames);
  nanobind::object call_function(nanobind::handle callable, std::vector<nanobind::object> args,
                                 nanobind::handle kwnames);
  /// Interprets `fn`, a Python function, as a new Frame with the arguments bound (a generator
  /// function runs to completion: an iterator over what it yielded).
  nanobind::object inline_function(nanobind::handle fn, std::vector<nanobind::object> args,
                                   nanobind::handle kwnames);
  // call_module.cpp: nn.Modules.
  /// A call of an nn.Module: its forward inlined (after its hooks are checked), or a __call__
  /// of the program's inlined; `plain_call`: nn.Module.__call__ itself (super().__call__).
  nanobind::object call_module(nanobind::handle module, std::vector<nanobind::object> args,
                               nanobind::handle kwnames, bool plain_call);
  nanobind::object call_module(nanobind::handle module, std::vector<nanobind::object> args,
                               nanobind::handle kwnames);
  /// Under a DistributedDataParallel forward in grad mode, a graph break before a call of
  /// `module` (whose forward is `forward`) that would take the frame's parameters past one
  /// bucket (Note [DDP bucket boundaries]). Returns whether the call is a level of module
  /// depth for the boundaries (`forward` is the program's code, under an active DDP).
  bool ddp_bucket_boundary(nanobind::handle module, nanobind::handle forward);
  /// items() / keys() / values() of a ModuleDict read from a source, as a list whose modules
  /// are wrapped with their item sources (the keys are guarded through Len and the items).
  nanobind::object module_dict_view(nanobind::object module, std::string_view what,
                                    const std::string& where);
  // call_class.cpp: classes.
  nanobind::object call_class(nanobind::handle callable, std::vector<nanobind::object> args,
                              nanobind::handle kwnames);
  // call_builtin.cpp: C functions and methods, builtins, containers' methods, descriptors.
  nanobind::object call_c_function(nanobind::handle callable, std::vector<nanobind::object> args,
                                   nanobind::handle kwnames);
  nanobind::object call_builtin(nanobind::handle fn, std::vector<nanobind::object> args,
                                nanobind::handle kwnames);
  /// functools.reduce(fn, iterable[, initial]), calling `fn` as the program's calls are made.
  nanobind::object reduce(std::vector<nanobind::object> args, nanobind::handle kwnames);
  /// A C method `leaf` of the container or fresh object `self`, run for real: its arguments
  /// pinned where it hashes or compares them, not where it only stores them.
  nanobind::object call_container_method(nanobind::handle method,
                                         std::vector<nanobind::object> args,
                                         nanobind::handle kwnames, PyObject* self,
                                         std::string_view leaf);
  /// Method descriptors, wrapper descriptors, method-wrappers and torch ops.
  nanobind::object call_descriptor(nanobind::handle callable, std::vector<nanobind::object> args,
                                   nanobind::handle kwnames);
  nanobind::object call_numpy_ufunc(nanobind::handle callable, std::vector<nanobind::object> args,
                                    nanobind::handle kwnames);
  // call_torch.cpp: tensor methods and torch's C functions (`name`: the callable's name).
  nanobind::object call_tensor_method(nanobind::handle callable, std::vector<nanobind::object> args,
                                      nanobind::handle kwnames, const std::string& name);
  nanobind::object call_torch_function(nanobind::handle callable,
                                       std::vector<nanobind::object> args, nanobind::handle kwnames,
                                       const std::string& name);
  // call_wrappers.cpp: wrappers of Python functions.
  nanobind::object call_script_function(nanobind::handle callable,
                                        std::vector<nanobind::object> args,
                                        nanobind::handle kwnames);
  nanobind::object call_lru_cache_wrapper(nanobind::handle callable,
                                          std::vector<nanobind::object> args,
                                          nanobind::handle kwnames);
  /// The function a functools.lru_cache wrapper wraps, when it is inlined (with its source);
  /// null otherwise.
  nanobind::object lru_wrapped(nanobind::handle wrapper);
  /// A function torch.vmap returned: func inlined on batched tensors (Note [vmap in the
  /// capture]).
  nanobind::object call_vmapped(nanobind::handle callable, std::vector<nanobind::object> args,
                                nanobind::handle kwnames);
  nanobind::object call_partial(nanobind::handle callable, std::vector<nanobind::object> args,
                                nanobind::handle kwnames);
  // call_library.cpp: library code, and the library calls handled specially.
  /// Whether `callable`, library code, runs for real when called.
  bool runs_for_real(nanobind::handle callable) const;
  /// torch.cond, while_loop, ...: RunsUnhooked.
  nanobind::object call_higher_order_op(nanobind::handle callable,
                                        std::vector<nanobind::object> args,
                                        nanobind::handle kwnames);
  /// torch.utils.checkpoint.checkpoint(fn, *args, **kwargs): fn(*args, **kwargs), its own
  /// keywords (use_reentrant, ...) dropped.
  nanobind::object call_checkpointed(nanobind::handle checkpoint,
                                     std::vector<nanobind::object> args, nanobind::handle kwnames);
  bool is_library_code(PyCodeObject* code) const;
  /// Whether `code` is library code that is inlined all the same when called: torch.optim's
  /// optimizers (their step, its wrappers and the functional updates), as Dynamo inlines them,
  /// and the wrappers of functions decorated with grad-mode context managers
  /// (torch/utils/_contextlib.py). LR schedulers stay library code (their methods are graph
  /// breaks).
  bool is_inlined_library_code(PyCodeObject* code) const;
  /// Whether a call of `fn` (a Python function) is inlined: program code or inlined library code.
  bool inlines(PyObject* fn) const;
  /// `obj`.keys() / values() / items() of a dict from outside the frame read from a source: a
  /// new list of its entries, each value wrapped with its item source (its length guarded).
  nanobind::object dict_view(nanobind::handle obj, std::string_view what);
  /// For torch._dynamo.disable's wrapper of torch.optim code (once torch.compile has run, Dynamo
  /// wraps every optimizer's _init_group and the fused updates: not for Dynamo to trace), the
  /// function it wraps, to be inlined; null for any other callable.
  nanobind::object dynamo_disabled_original(nanobind::handle fn);
  /// The function a torch.compile'd function wraps (`_torchdynamo_orig_callable` of a
  /// compile_wrapper that is not a torch._dynamo.disable), or an invalid object. Captured as
  /// Dynamo captures a nested compiled function: its original is inlined.
  nanobind::object torch_compiled_original(nanobind::handle fn);
  /// A call of the wrapper an LR scheduler puts in place of its optimizer's `step`: the
  /// optimizer's step inlined; null when `fn` is no such wrapper (see the definition).
  nanobind::object call_scheduler_patched_step(nanobind::handle fn,
                                               std::vector<nanobind::object>& args,
                                               nanobind::handle kwnames);
  /// torch.set_grad_enabled(mode): grad mode set for real (restored when the interpreter stops).
  nanobind::object set_grad_enabled(nanobind::handle cls, std::vector<nanobind::object> args,
                                    nanobind::handle kwnames);
  // interpreter_objects.cpp: objects of the program's classes.
  /// Whether `cls` is a plain class of the program that the frame may construct.
  bool constructible(nanobind::handle cls) const;
  /// A new object of `cls` (fresh), with its __init__ inlined.
  nanobind::object construct(nanobind::handle cls, std::vector<nanobind::object> args,
                             nanobind::handle kwnames);
  /// `obj`'s special method `name` bound to it, when its class defines it in program code
  /// (to be inlined); a null object otherwise.
  nanobind::object special_method(nanobind::handle obj, const char* name);
  /// Gives `fn`, a function taken from a class, a constant source if it has closure cells (so
  /// that they are read through it, guarded) and no source yet.
  void give_closure_source(PyObject* fn);

  tracer::TraceSession& session_;
  SourceTable& sources_;
  GuardSet& guards_;
  InterpreterOptions options_;

  std::vector<Frame*> frames_;  ///< the inlining stack, outermost first
  std::vector<int> input_sources_;
  std::vector<std::pair<int, int64_t>> symbol_sources_;
  std::unordered_map<PyObject*, int> source_of_;        ///< non-constant objects read from sources
  std::unordered_map<PyObject*, PyObject*> tracer_of_;  ///< real tensor -> its tracer tensor
  std::unordered_map<PyObject*, int> tensor_source_;    ///< real tensor -> its first source
  std::unordered_map<PyObject*, PyObject*> real_of_;    ///< tracer tensor -> its real tensor
  std::unordered_map<int, nanobind::object> wrapped_;   ///< source -> what wrap() returned
  std::unordered_map<PyObject*, int> copy_source_;      ///< wrapped copy -> its container's source
  std::unordered_map<PyObject*, nanobind::object> copy_of_;  ///< list or dict -> the frame's copy
  std::vector<std::pair<nanobind::object, int>> mutated_containers_;
  std::unordered_set<PyObject*> mutated_set_;
  /// Cells of closures from outside the frame -> (source of the function, index in its
  /// closure); the function source is -1 for the top frame, whose index is a localsplus slot.
  std::unordered_map<PyObject*, std::pair<int, int>> cell_origin_;
  std::unordered_set<PyObject*> fresh_;      ///< objects the frame created
  std::vector<nanobind::object> keepalive_;  ///< keeps the maps' keys alive
  int stop_at_ = -1;
  int64_t stop_count_ = -1;
  StopState stop_;
  /// The frame whose CALL is calling `direct_callable_` now: the function inlined for it
  /// returns the call's result (Frame::passthrough).
  Frame* direct_caller_ = nullptr;
  PyObject* direct_callable_ = nullptr;
  nanobind::object handled_exc_;  ///< the exception an except clause handles (sys.exc_info)
  /// A with block's manager made again (Note [Graph breaks inside with blocks]).
  struct Reentry {
    nanobind::object exit;     ///< the `__exit__` BEFORE_WITH pushed (keeps the key alive)
    nanobind::object factory;  ///< called with no arguments: an equal manager, not entered
    int grad = -1;             ///< grad mode it sets: 0, 1, or -1 (none)
  };
  std::unordered_map<PyObject*, Reentry> reentries_;  ///< by the `__exit__` object
  bool grad_inputs_ = false;                          ///< a graph input requires grad
  bool entry_grad_ = true;                            ///< grad mode when the frame was entered
  tracer::GradInputs grad_tracers_;
  std::vector<int> grad_tracer_inputs_;
  std::vector<Store> stores_;
  /// TypeMatch-guarded objects -> the sources they were read from.
  std::unordered_map<PyObject*, std::vector<int>> identity_free_;
  int64_t instructions_ = 0;
  int64_t inlined_calls_ = 0;
  // Note [DDP bucket boundaries] (call_module.cpp).
  int64_t ddp_cap_ = -2;   ///< the active DDP's bucket_bytes_cap; -1: none; -2: not read yet
  int64_t ddp_bytes_ = 0;  ///< bytes of the parameters of the frame's module calls so far
  int module_depth_ = 0;   ///< nn.Module forwards being inlined now
};

}  // namespace ember::capture
