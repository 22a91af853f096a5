/// \file
/// Guards: the checks that decide whether a compiled frame may run for a call. Each guard reads
/// one evaluated source (source.h). They run in C++ on every call, in the order they were
/// added, and stop at the first failure.
///
///   TensorMatch  a tensor with the traced dtype, device, sizes, strides, requires_grad and
///                dispatch key set
///   IdMatch      the very object seen while tracing (modules, functions, classes, objects)
///   TypeMatch    an object of the exact type seen (an argument of a program's plain class:
///                its attributes are guarded one by one as they are read)
///   Equals       a value of the same exact type that compares equal: the immutable values of
///                is_guardable_constant (numbers, strings, torch.device / dtype / Size, enum
///                members, frozen dataclasses of these, tuples of these)
///   Len          a list, tuple or container of the traced type and length
///   Same         the same object as another source (two inputs that were one tensor)
///   StateEquals  plain data (plain_data.h) structurally equal to a snapshot: what a
///                copy.deepcopy at capture time read
///   Aliasing     a tensor the graph mutates shares memory with exactly the other inputs it
///                shared memory with when compiling (none, for a graph traced on distinct
///                tensors: its functional form reads the other inputs' old values)
///   SizeRelations the size guards of a graph with shape symbols (sym/guard.h), each symbol read
///                from the size of the tensor source it stands for; after the TensorMatch guards
///                of those sources, which check that a dynamic dim is at least 2
/// Plus the global state read once per call (GlobalState): what changes the meaning of a trace
/// without changing any input.
#pragma once

#include <ATen/core/Tensor.h>
#include <Python.h>
#include <c10/core/Device.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/ScalarType.h>
#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "capture/guards/source.h"
#include "sym/guard.h"

namespace ember::capture {

enum class GuardKind : uint8_t {
  TensorMatch,
  IdMatch,
  TypeMatch,
  Equals,
  Len,
  Same,
  StateEquals,
  Aliasing,
  SizeRelations
};

struct TensorMeta {
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  /// -1 for a dynamic dim: any size of at least 2 (sizes 0 and 1 are specialized).
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  /// With a dynamic dim: the dims from outermost to innermost; the strides must be the dense
  /// strides of the call's sizes in that order (`strides` is then not compared).
  std::vector<int64_t> stride_order;
  bool requires_grad = false;
  c10::DispatchKeySet keys;
};

struct Guard {
  GuardKind kind = GuardKind::IdMatch;
  int source = -1;
  /// Equals: the value; Len, TypeMatch: the type; IdMatch: a weak reference to the object where
  /// its type allows one (`weak`), else the object.
  nanobind::object expected;
  PyObject* id = nullptr;  ///< IdMatch: the object's address
  bool weak = false;       ///< IdMatch: `expected` is a weak reference
  int64_t length = 0;      ///< Len
  int other = -1;          ///< Same: the other source
  TensorMeta tensor;       ///< TensorMatch
  /// Aliasing: the other tensor inputs, and for each whether it shares memory with `source`.
  std::vector<int> others;
  std::vector<uint8_t> shares;
  /// SizeRelations: per shape symbol (by id), the tensor source and dim whose size it is; and
  /// the relations that must give their traced answers.
  std::vector<std::pair<int, int64_t>> symbol_at;
  std::vector<sym::SizeGuard> size_guards;
};

/// The global state a trace depends on: what Dynamo's global-state guard covers. Read in C++
/// on every call of a compiled frame (a few loads of thread-local and global flags).
struct GlobalState {
  bool grad_enabled = false;
  bool autocast_cpu = false;
  bool autocast_cuda = false;
  /// The autocast dtype of a device where autocast is on; Undefined where it is off.
  c10::ScalarType autocast_cpu_dtype = c10::ScalarType::Undefined;
  c10::ScalarType autocast_cuda_dtype = c10::ScalarType::Undefined;
  /// torch.set_default_dtype: the dtype of factory calls and of Python floats made tensors.
  c10::ScalarType default_dtype = c10::ScalarType::Float;
  /// torch.use_deterministic_algorithms(mode, warn_only=...).
  bool deterministic = false;
  bool deterministic_warn_only = false;
  /// torch.set_float32_matmul_precision, torch.backends.cuda.matmul.allow_tf32,
  /// torch.backends.cudnn.allow_tf32 and cuBLAS's reduced-precision reductions.
  int8_t matmul_precision = 0;
  bool tf32_cublas = false;
  bool tf32_cudnn = false;
  int8_t fp16_reduction = 0;
  int8_t bf16_reduction = 0;
  /// torch.set_num_threads.
  int num_threads = 0;
  /// The torch function mode stack (torch.set_default_device pushes one; so does any
  /// TorchFunctionMode), whether torch function is disabled, and the dispatch mode stack.
  /// Capture gives up where either stack is non-empty: a compiled graph would bypass the modes.
  int64_t torch_function_modes = 0;
  int8_t torch_function_disabled = 0;
  int64_t dispatch_modes = 0;

  static GlobalState current();
  bool operator==(const GlobalState&) const = default;
  /// `name=value` for each field, in declaration order.
  std::vector<std::pair<std::string, std::string>> fields() const;
  /// The fields that differ from `now`, as `name old -> new`, comma-separated.
  std::string diff(const GlobalState& now) const;
};

class GuardSet {
 public:
  /// `dynamic_dims`: dims of a size of at least 2 that the graph takes as shape symbols; any size
  /// of at least 2 passes there (with dense strides in the traced order).
  void add_tensor(int source, PyObject* tensor, const std::vector<int64_t>& dynamic_dims = {});
  /// The size guards of a graph with shape symbols; `symbol_at[id]`: the (source, dim) symbol
  /// `id` is read from.
  void add_size_relations(std::vector<std::pair<int, int64_t>> symbol_at,
                          std::vector<sym::SizeGuard> guards);
  /// Holds `obj` weakly where its type allows (modules, functions, classes): a guard must not
  /// keep a dropped model alive. Once the object is gone the guard fails, even for a new object
  /// at the same address.
  void add_id(int source, PyObject* obj);
  void add_type(int source, PyObject* obj) {
    add_object(GuardKind::TypeMatch, source, reinterpret_cast<PyObject*>(Py_TYPE(obj)));
  }
  void add_equals(int source, PyObject* value) { add_object(GuardKind::Equals, source, value); }
  /// `snapshot`: a deep copy of the source's value at capture time.
  void add_state_equals(int source, PyObject* snapshot) {
    add_object(GuardKind::StateEquals, source, snapshot);
  }
  void add_len(int source, PyObject* container);
  void add_same(int source, int other);
  /// `source`: a tensor the graph mutates; `others`: the other tensor inputs; `tensors`: the
  /// values of `source` and then `others` at capture, whose memory overlaps the guard keeps
  /// (runtime::memory_overlaps).
  void add_aliasing(int source, std::vector<int> others, const std::vector<at::Tensor>& tensors);
  void set_global_state(GlobalState s) { state_ = s; }

  /// Whether every guard passes on `values` (SourceTable::evaluate of the call's frame).
  bool check(const std::vector<nanobind::object>& values) const;
  /// The first failing guard, described (for EMBER_LOGS=recompiles); empty when all pass.
  std::string first_failure(const std::vector<nanobind::object>& values,
                            const SourceTable& sources) const;
  /// One line per guard.
  std::string describe(const SourceTable& sources) const;

  size_t size() const { return guards_.size(); }

 private:
  bool passes(const Guard& g, const std::vector<nanobind::object>& values) const;
  void add_object(GuardKind kind, int source, PyObject* obj);

  std::vector<Guard> guards_;
  GlobalState state_;
};

/// The object the weak reference `ref` points at (borrowed: valid while the caller holds the
/// object some other way, or only for comparing addresses), or nullptr once it is gone.
PyObject* weak_target(PyObject* ref);

/// Equals' comparison: the same exact type and ==, with NaN equal to NaN and 0.0 unequal to -0.0.
bool values_equal(PyObject* a, PyObject* b);

/// Whether `obj` is an immutable value that Equals guards: None, bool, int, float, str, bytes,
/// Ellipsis; torch.device, dtype, layout, memory_format and Size; enum members; numpy scalars;
/// frozen
/// dataclasses whose fields are such values; and tuples of these. Equal values are
/// interchangeable, so a fresh object of an equal value (a property that makes a new
/// torch.device per read) passes.
bool is_guardable_constant(PyObject* obj);

/// Whether `v` is a numpy scalar (numpy.float64(8.0), numpy.int64, numpy.bool_).
bool is_numpy_scalar(PyObject* v);
/// Whether `t` is a numpy scalar type (numpy.float64, ...).
bool is_numpy_scalar_type(PyObject* t);

/// Whether `v` is an enum member (enum.Enum).
bool is_enum_member(nanobind::handle v);

}  // namespace ember::capture
