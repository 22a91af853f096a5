#include "tracer/trace_session.h"

#include <ATen/FunctionalTensorWrapper.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/enum_tag.h>
#include <c10/core/InferenceMode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/where.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "graph/pinned_symbols.h"
#include "graph/shape_rules.h"
#include "graph/verifier.h"
#include "support/error.h"
#include "sym/eval.h"
#include "tracer/absent_device_guard.h"
#include "tracer/conv_result_layout.h"
#include "tracer/convert.h"
#include "tracer/meta_cache.h"
#include "tracer/rewrite_call.h"
#include "tracer/sym_node.h"
#include "tracer/tracer_tensor.h"

namespace ember::tracer {

namespace {

thread_local TraceSession* tls_current = nullptr;

// The sessions entered on any thread (only_entered()).
std::mutex entered_mutex;
std::vector<TraceSession*> entered_sessions;

namespace fz = at::functionalization::impl;

// Ops whose results depend on tensor data. A trace has no data, so these end it. Indexing has a
// data-dependent shape only with boolean masks.
bool is_data_dependent(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  using graph::OpKind;
  const OpKind kind = op_kind(op.schema());
  if (kind == OpKind::index || kind == OpKind::index_put || kind == OpKind::_index_put_impl) {
    if (args.size() < 2 || !args[1].isList()) return false;
    for (const c10::IValue& e : args[1].toListRef()) {
      if (e.isTensor() && e.toTensor().defined() &&
          (e.toTensor().scalar_type() == c10::kBool || e.toTensor().scalar_type() == c10::kByte)) {
        return true;
      }
    }
    return false;
  }
  if (kind == OpKind::one_hot) {  // its shape depends on the data only without num_classes
    return args.size() < 2 || !args[1].isInt() || args[1].toInt() < 0;
  }
  if (op.hasTag(at::Tag::data_dependent_output) || op.hasTag(at::Tag::dynamic_output_shape)) {
    return true;
  }
  return kind == OpKind::_local_scalar_dense || kind == OpKind::item ||
         kind == OpKind::is_nonzero || kind == OpKind::equal || kind == OpKind::allclose;
}

// Factories whose result is uninitialised memory. Called without tensor arguments while tracing
// they come from PyTorch internals (torch.tensor(...) fills one through its data pointer), so they
// run eagerly and their result is a real tensor, which becomes a constant if the program uses it.
bool is_uninitialized_factory(const c10::OperatorHandle& op) {
  const graph::OpKind kind = op_kind(op.schema());
  return kind == graph::OpKind::empty || kind == graph::OpKind::empty_strided ||
         kind == graph::OpKind::empty_permuted;
}

// A factory asked for meta tensors: metadata computation (a Python meta function that the
// functionalization of an in-place op runs, such as sigmoid_'s), never the program's values.
bool asks_for_meta(c10::ArrayRef<c10::IValue> args) {
  for (const c10::IValue& v : args) {
    if (v.isDevice() && v.toDevice().is_meta()) return true;
  }
  return false;
}

// Calls `fn` on every tensor inside `v` (a tensor, a list of tensors or optional tensors).
template <typename F>
void for_each_tensor(const c10::IValue& v, F&& fn) {
  if (v.isTensor()) {
    fn(v.toTensor());
  } else if (v.isTensorList()) {
    for (at::Tensor t : v.toTensorList()) fn(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) {
      if (e.isTensor()) fn(e.toTensor());
    }
  }
}

bool is_tensor_type(const c10::TypePtr& type) {
  c10::TypePtr t = type;
  if (auto opt = t->cast<c10::OptionalType>()) t = opt->getElementType();
  if (t->kind() == c10::TypeKind::TensorType) return true;
  if (auto list = t->cast<c10::ListType>()) {
    c10::TypePtr e = list->getElementType();
    if (auto opt = e->cast<c10::OptionalType>()) e = opt->getElementType();
    return e->kind() == c10::TypeKind::TensorType;
  }
  return false;
}

// Result metadata for an op with no meta kernel, found by running its real kernel once on
// zero-filled tensors of the traced geometry, on the device they report. Only shapes, strides and
// dtypes of the results are kept. Ops whose results depend on data are refused before this.
torch::jit::Stack run_on_zeros(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const std::string op_name = c10::toString(op.schema().operator_name());
  auto zeros_like_tracer = [](const at::Tensor& t) -> at::Tensor {
    if (as_tracer(t) == nullptr) return t;
    at::Tensor meta = meta_like(t);
    int64_t elems = static_cast<int64_t>(meta.storage().nbytes() / meta.itemsize());
    return at::zeros({elems}, t.options().device(t.device()))
        .as_strided(t.sizes(), t.strides(), t.storage_offset());
  };
  torch::jit::Stack real;
  try {
    for (const c10::IValue& v : args) {
      if (v.isTensor()) {
        real.emplace_back(zeros_like_tracer(v.toTensor()));
      } else if (v.isTensorList()) {
        c10::List<at::Tensor> l;
        for (at::Tensor t : v.toTensorList()) l.push_back(zeros_like_tracer(t));
        real.emplace_back(l);
      } else if (v.isList() && !v.toListRef().empty() && v.toListRef()[0].isTensor()) {
        c10::List<std::optional<at::Tensor>> l;
        for (const c10::IValue& e : v.toListRef()) {
          l.push_back(e.isTensor() ? std::optional<at::Tensor>(zeros_like_tracer(e.toTensor()))
                                   : std::nullopt);
        }
        real.emplace_back(l);
      } else {
        real.push_back(v);
      }
    }
    op.callBoxed(&real);
  } catch (const c10::Error& e) {
    throw Unsupported(op_name + " has no meta implementation, and running it on zeros failed: " +
                      e.what_without_backtrace());
  }
  torch::jit::Stack metas;
  for (c10::IValue& r : real) {
    if (r.isTensor()) {
      metas.emplace_back(r.toTensor().defined() ? meta_like(r.toTensor()) : r.toTensor());
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> l;
      for (at::Tensor t : r.toTensorList()) l.push_back(meta_like(t));
      metas.emplace_back(l);
    } else {
      metas.push_back(std::move(r));
    }
  }
  return metas;
}

}  // namespace

namespace {

// A tracer tensor requires grad when the tensor it stands for does (under no_grad too): ATen's
// decompositions read it. matmul folds a 3D input times a weight into one mm when the weight
// requires grad (should_fold), else it runs a bmm over the leading dim with the weight expanded:
// Longformer's projections of its [seq, batch, 768] transposed input would become batched
// products of 4 rows each where eager runs 128x128-tile gemms.
// Under grad mode this makes autograd record too, which only the joint trace wants: it sets
// requires_grad itself, so this applies under no_grad (and never in inference mode, where
// inference tensors cannot require grad outside it later).
void mirror_requires_grad(const at::Tensor& real, at::Tensor& tracer) {
  if (real.requires_grad() && !at::GradMode::is_enabled() && !c10::InferenceMode::is_enabled()) {
    tracer.requires_grad_(true);
  }
}

}  // namespace

TraceSession::TraceSession(CompileOptions options, RewriteTable rewrites)
    : options_(std::move(options)), rewrites_(rewrites) {}

const CompileOptions::Trace& trace_options() {
  static const CompileOptions::Trace defaults;
  const TraceSession* s = TraceSession::current();
  if (s == nullptr) s = TraceSession::only_entered();
  return s != nullptr ? s->options().trace : defaults;
}

TraceSession::~TraceSession() {
  if (active_) exit();
}

namespace {

/// `v` with every symbolic int replaced by its hint (what a meta kernel can read).
c10::IValue at_hints(const c10::IValue& v) {
  auto hint_of = [](const c10::SymInt& s) -> int64_t {
    if (std::optional<int64_t> c = s.maybe_as_int()) return *c;
    auto* n = dynamic_cast<SizeNode*>(s.toSymNodeImplUnowned());
    EMBER_UNSUPPORTED(n != nullptr) << "a symbolic int of another tracer";
    return n->hint();
  };
  if (v.isSymInt()) return c10::IValue(hint_of(v.toSymInt()));
  if (v.isList() && !v.isTensorList()) {
    bool any = false;
    for (const c10::IValue& e : v.toListRef()) any = any || e.isSymInt();
    if (!any) return v;
    std::vector<int64_t> out;
    for (const c10::IValue& e : v.toListRef()) {
      out.push_back(e.isSymInt() ? hint_of(e.toSymInt()) : e.toInt());
    }
    return c10::IValue(out);
  }
  return v;
}

/// Some argument is a symbolic int (of ember's tracer), or a list holding one.
bool has_symbolic_ints(c10::ArrayRef<c10::IValue> args) {
  auto symbolic = [](const c10::IValue& v) {
    return v.isSymInt() && v.toSymInt().is_heap_allocated();
  };
  for (const c10::IValue& v : args) {
    if (symbolic(v)) return true;
    if (v.isList() && !v.isTensorList()) {
      for (const c10::IValue& e : v.toListRef()) {
        if (symbolic(e)) return true;
      }
    }
  }
  return false;
}

/// Some argument of the call is symbolic, or is a tensor of a symbolic type.
bool reads_symbols(const graph::Graph& g, const std::vector<graph::Arg>& args) {
  for (const graph::Arg& a : args) {
    if (std::holds_alternative<graph::DimExpr>(a) || std::holds_alternative<graph::Dims>(a)) {
      return true;
    }
    if (const auto* r = std::get_if<graph::ValueRef>(&a)) {
      if (!g.type(r->id).is_static()) return true;
    }
    if (const auto* l = std::get_if<graph::ValueList>(&a)) {
      for (const std::optional<graph::ValueId>& v : l->items) {
        if (v && !g.type(*v).is_static()) return true;
      }
    }
  }
  return false;
}

}  // namespace

TraceSession* TraceSession::current() {
  return tls_current;
}

TraceSession* TraceSession::only_entered() {
  std::lock_guard<std::mutex> lock(entered_mutex);
  return entered_sessions.size() == 1 ? entered_sessions.front() : nullptr;
}

at::Tensor TraceSession::add_input(const at::Tensor& example, graph::InputKind kind,
                                   const std::string& name, std::optional<c10::Device> device,
                                   const std::vector<int64_t>& dynamic_dims,
                                   const std::vector<std::string>& symbol_keys) {
  EMBER_INTERNAL_ASSERT(!finished_) << "add_input after finish";
  EMBER_CHECK(example.defined()) << "input '" << name << "' is an undefined tensor";
  EMBER_UNSUPPORTED(as_tracer(example) == nullptr && !fz::isFunctionalTensor(example))
      << "input '" << name << "' is already a traced tensor";
  graph::TensorType type = tensor_type(example, device);
  if (!dynamic_dims.empty()) {
    const graph::Dims concrete = type.strides;
    EMBER_CHECK(symbol_keys.empty() || symbol_keys.size() == dynamic_dims.size())
        << "input '" << name << "': " << symbol_keys.size() << " symbol keys for "
        << dynamic_dims.size() << " dynamic dims";
    for (size_t k = 0; k < dynamic_dims.size(); ++k) {
      int64_t d = dynamic_dims[k];
      EMBER_CHECK(d >= -example.dim() && d < example.dim())
          << "input '" << name << "': dynamic dim " << d << " of a " << example.dim()
          << "-dim tensor";
      if (d < 0) d += example.dim();
      auto ud = static_cast<size_t>(d);
      if (!type.sizes[ud].is_constant()) continue;
      const std::string* key = symbol_keys.empty() ? nullptr : &symbol_keys[k];
      if (key != nullptr) {
        auto known = symbol_of_key_.find(*key);
        if (known != symbol_of_key_.end()) {
          int64_t seen = sym::hint(known->second, graph_.symbols);
          EMBER_CHECK(seen == example.size(d))
              << "input '" << name << "': dim " << d << " is symbol " << *key << ", seen as "
              << seen << " before but " << example.size(d) << " here";
          type.sizes[ud] = graph::DimExpr(known->second);
          continue;
        }
      }
      sym::SymExpr e =
          graph_.symbols.create_size(example.size(d), name + ".size()[" + std::to_string(d) + "]");
      if (key != nullptr && !e.is_constant()) symbol_of_key_.emplace(*key, e);
      type.sizes[ud] = graph::DimExpr(e);
    }
    type.strides = graph::dense_strides_like(type.sizes, concrete);
    for (size_t d = 0; d < concrete.size(); ++d) {
      EMBER_UNSUPPORTED(sym::hint(type.strides[d].expr(), graph_.symbols) == concrete[d].constant())
          << "input '" << name << "' with dynamic sizes is not dense (strides " << example.strides()
          << ")";
    }
  }
  graph::ValueId v = graph_.add_input(type, kind, name);
  EMBER_INTERNAL_ASSERT(!active_) << "add_input while the trace is entered";
  at::Tensor meta = meta_like(example);
  at::Tensor tracer = make_tracer(this, v, std::move(meta), device.value_or(example.device()));
  // Note [Tracing for a device this torch lacks]: the CPU reads as the stand-in device.
  if (device && ensure_device_guard(device->type())) stand_in_device_ = device;
  at::Tensor functional = fz::to_functional_tensor(tracer);
  mirror_requires_grad(example, functional);
  functional_inputs_.push_back(functional);
  functional_input_index_.push_back(graph_.inputs.size() - 1);
  return functional;
}

at::Tensor TraceSession::add_input_like(const at::Tensor& like, graph::InputKind kind,
                                        const std::string& name) {
  EMBER_INTERNAL_ASSERT(!finished_) << "add_input_like after finish";
  EMBER_INTERNAL_ASSERT(!active_) << "add_input_like while the trace is entered";
  EMBER_INTERNAL_ASSERT(like.defined()) << "add_input_like of an undefined tensor";
  graph::Dims sizes;
  std::vector<int64_t> hints;
  for (const c10::SymInt& d : like.sym_sizes()) {
    sizes.push_back(to_dim(d));
    std::optional<int64_t> c = sizes.back().as_constant();
    hints.push_back(c ? *c : sym::hint(sizes.back().expr(), graph_.symbols));
  }
  at::Tensor meta =
      at::empty(hints, at::TensorOptions().dtype(like.scalar_type()).device(c10::kMeta));
  graph::TensorType type = tensor_type(meta, like.device());
  type.sizes = sizes;
  type.strides = graph::contiguous_strides(sizes);
  graph::ValueId v = graph_.add_input(type, kind, name);
  at::Tensor functional =
      fz::to_functional_tensor(make_tracer(this, v, std::move(meta), like.device()));
  functional_inputs_.push_back(functional);
  functional_input_index_.push_back(graph_.inputs.size() - 1);
  return functional;
}

at::Tensor TraceSession::add_constant_tensor(const at::Tensor& t) {
  EMBER_INTERNAL_ASSERT(!active_) << "add_constant_tensor while the trace is entered";
  bool strict = strict_constants_;
  strict_constants_ = false;
  graph::ValueId v = add_constant(t);
  strict_constants_ = strict;
  at::Tensor tracer = make_tracer(this, v, meta_like(t), t.device());
  at::Tensor functional = fz::to_functional_tensor(tracer);
  mirror_requires_grad(t, functional);
  return functional;
}

void TraceSession::enter() {
  EMBER_INTERNAL_ASSERT(!active_ && !finished_) << "trace session entered twice";
  outer_tls_ = c10::impl::tls_local_dispatch_key_set();
  outer_reapply_views_ = fz::getFunctionalizationReapplyViewsTLS();
  outer_session_ = tls_current;
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::PrivateUse1, true);
  c10::impl::tls_set_dispatch_key_excluded(c10::DispatchKey::BackendSelect, true);
  // Functionalize in the TLS include set, as torch.func.functionalize does: some functionalization
  // kernels decide from it whether to wrap their results (`_to_copy` does not otherwise, and an
  // in-place op on its result then fails).
  c10::impl::tls_set_dispatch_key_included(c10::DispatchKey::Functionalize, true);
  fz::setFunctionalizationReapplyViewsTLS(true);
  tls_current = this;
  active_ = true;
  std::lock_guard<std::mutex> lock(entered_mutex);
  entered_sessions.push_back(this);
}

void TraceSession::exit() {
  if (!active_) return;
  // The state from before enter(), except autocast's keys: the traced program may have turned
  // autocast on or off (a with block), and that outlives an exit() and enter() around add_input.
  c10::impl::LocalDispatchKeySet now = c10::impl::tls_local_dispatch_key_set();
  c10::impl::LocalDispatchKeySet restored = *outer_tls_;
  const c10::DispatchKeySet autocast = c10::autocast_dispatch_keyset;
  restored.included_ = (restored.included_ - autocast) | (now.included_ & autocast);
  restored.excluded_ = (restored.excluded_ - autocast) | (now.excluded_ & autocast);
  c10::impl::_force_tls_local_dispatch_key_set(restored);
  fz::setFunctionalizationReapplyViewsTLS(outer_reapply_views_);
  tls_current = outer_session_;
  active_ = false;
  std::lock_guard<std::mutex> lock(entered_mutex);
  std::erase(entered_sessions, this);
}

graph::ValueId TraceSession::add_constant(const at::Tensor& t) {
  auto it = constant_ids_.find(t.unsafeGetTensorImpl());
  if (it != constant_ids_.end()) return it->second;
  EMBER_UNSUPPORTED(!fz::isFunctionalTensor(t)) << "a functional tensor from outside the trace";
  // A 0-dim tensor is a scalar the op made from a Python number (x[i] = 5.0 makes one that is
  // not marked as a wrapped number).
  EMBER_UNSUPPORTED(!strict_constants_ || t.unsafeGetTensorImpl()->is_wrapped_number() ||
                    t.dim() == 0)
      << "a tensor that is not an input of the captured function reached the graph (read by "
      << "library code, or from an object the capture does not follow)";
  graph::ValueId v = graph_.add_input(tensor_type(t), graph::InputKind::Constant);
  constants_.push_back(t);
  constant_ids_.emplace(t.unsafeGetTensorImpl(), v);
  return v;
}

graph::ValueId TraceSession::value_of(const at::Tensor& t) {
  if (TracerTensorImpl* tr = as_tracer(t)) {
    EMBER_CHECK(tr->session() == this)
        << "a tensor traced by another trace is used here (it escaped the function that made it)";
    return tr->value();
  }
  EMBER_INTERNAL_ASSERT(!fz::isFunctionalTensor(t)) << "a functional wrapper reached the tracer";
  return add_constant(t);
}

void TraceSession::record_skipping(const Rewrite* row, const c10::OperatorHandle& op,
                                   torch::jit::Stack* stack) {
  skipping_.push_back(row);
  try {
    record(op, stack);
  } catch (...) {
    skipping_.pop_back();
    throw;
  }
  skipping_.pop_back();
}

void TraceSession::record(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const c10::FunctionSchema& schema = op.schema();
  const std::string op_name = c10::toString(schema.operator_name());
  const size_t num_args = schema.arguments().size();
  EMBER_INTERNAL_ASSERT(stack->size() >= num_args) << op_name << ": short stack";
  const size_t base = stack->size() - num_args;

  bool any_tracer = false;
  bool any_real = false;
  for (size_t i = 0; i < num_args; ++i) {
    for_each_tensor((*stack)[base + i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (as_tracer(t) != nullptr) {
        any_tracer = true;
      } else {
        any_real = true;
      }
    });
  }

  // The rewrites read sizes as numbers: a trace with symbolic sizes records ops as they are
  // (docs/design/symbolic.md).
  if (any_tracer && !symbolic()) {
    // The rewrites (rewrite_call.h), in table order: the first that applies records the op.
    const c10::ArrayRef<c10::IValue> call_args(stack->data() + base, num_args);
    RewriteCall call{*this, op, stack, base, num_args, target_device(call_args)};
    const std::string& disabled = options_.trace.disabled_rewrites;
    const graph::OpKind kind = op_kind(schema);
    for (const Rewrite& r : rewrites_) {
      if (!r.matches(kind, schema.name())) continue;
      if (std::find(skipping_.begin(), skipping_.end(), &r) != skipping_.end()) continue;
      if (!disabled.empty() && rewrite_disabled(disabled, r.name)) continue;
      if (!r.applies_on(call.target, options_.trace)) continue;
      call.row = &r;
      if (r.apply(call)) return;
    }
  }

  // A factory called by the program (not from inside functionalization, which wraps results
  // itself) returns functional tensors, so later in-place ops on it are functionalized too.
  const bool wrap_functional =
      !any_tracer && !c10::impl::tls_is_dispatch_key_excluded(c10::DispatchKey::Functionalize);

  // Metadata and eager computations below run with the dispatch state from before the trace.
  EMBER_INTERNAL_ASSERT(outer_tls_.has_value()) << op_name << " recorded outside enter()";
  c10::impl::ForceDispatchKeyGuard untraced(*outer_tls_);

  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = (*stack)[base + i];
    EMBER_UNSUPPORTED(!(v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1))
        << op_name << " asks for a tensor on the PrivateUse1 device, whose dispatch key ember's "
        << "tracer uses";
  }
  // A computation on real tensors with a symbolic argument (`buffer[:T]` for a symbolic T) is
  // recorded, its tensors as constants: run now, it would specialize T.
  const bool symbolic_args =
      symbolic() && has_symbolic_ints(c10::ArrayRef<c10::IValue>(stack->data() + base, num_args));
  if (!any_tracer && !symbolic_args &&
      (any_real || is_uninitialized_factory(op) ||
       asks_for_meta(c10::ArrayRef<c10::IValue>(stack->data() + base, num_args)))) {
    // Only real tensors: a constant computation. Run it now; its result is a constant. Autograd
    // and ADInplaceOrView already ran above this kernel, so the call continues below them.
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    op.callBoxed(stack);
    return;
  }
  if (any_tracer &&
      is_data_dependent(op, c10::ArrayRef<c10::IValue>(stack->data() + base, num_args))) {
    throw DataDependentError(op_name +
                             " depends on the data of a traced tensor (for example .item(), "
                             ".tolist(), bool(tensor) or a data-dependent output shape)");
  }
  for (const c10::Argument& a : schema.arguments()) {
    EMBER_UNSUPPORTED(!(a.alias_info() && a.alias_info()->isWrite()))
        << op_name << " mutates its argument '" << a.name()
        << "', but the tracer only records functional ops (is a tensor missing functionalization?)";
  }

  // The device that results report: an explicit device argument, else that of the first tensor
  // argument that is not a CPU scalar, else that of the first tensor argument, else the CPU.
  std::optional<c10::Device> device_arg;
  std::optional<c10::Device> tensor_device;
  std::optional<c10::Device> scalar_device;

  std::vector<graph::Arg> args;
  args.reserve(num_args);
  torch::jit::Stack meta_stack;
  meta_stack.reserve(num_args);
  for (size_t i = 0; i < num_args; ++i) {
    const c10::Argument& a = schema.arguments()[i];
    const c10::IValue& v = (*stack)[base + i];
    auto note_device = [&](const at::Tensor& t) {
      c10::Device d = stand_in(t.device());
      if (t.dim() == 0 && t.device().is_cpu()) {
        if (!scalar_device) scalar_device = d;
      } else if (!tensor_device) {
        tensor_device = d;
      }
    };
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        args.emplace_back(graph::NoneArg{});
        meta_stack.emplace_back(t);
        continue;
      }
      note_device(t);
      args.emplace_back(graph::ValueRef{value_of(t)});
      // A Python scalar's tensor (a CPU "wrapped number") promotes weakly: `int_tensor * 2.5` is
      // float32. A meta copy would lose that, so the meta kernel gets the real CPU scalar, which
      // may mix with tensors of any device.
      meta_stack.emplace_back(t.unsafeGetTensorImpl()->is_wrapped_number() ? t : meta_like(t));
    } else if (is_tensor_type(a.type()) && v.isList()) {
      graph::ValueList list;
      c10::TypePtr elem = a.type()->cast<c10::ListType>()
                              ? a.type()->cast<c10::ListType>()->getElementType()
                              : c10::TypePtr(c10::TensorType::get());
      list.optional_items = elem->cast<c10::OptionalType>() != nullptr;
      if (list.optional_items) {
        c10::List<std::optional<at::Tensor>> metas;
        for (const c10::IValue& e : v.toListRef()) {
          if (e.isNone() || (e.isTensor() && !e.toTensor().defined())) {
            list.items.emplace_back(std::nullopt);
            metas.push_back(std::nullopt);
          } else {
            note_device(e.toTensor());
            list.items.emplace_back(value_of(e.toTensor()));
            metas.push_back(meta_like(e.toTensor()));
          }
        }
        meta_stack.emplace_back(metas);
      } else {
        c10::List<at::Tensor> metas;
        for (const c10::IValue& e : v.toListRef()) {
          const at::Tensor& t = e.toTensor();
          note_device(t);
          list.items.emplace_back(value_of(t));
          metas.push_back(meta_like(t));
        }
        meta_stack.emplace_back(metas);
      }
      args.emplace_back(std::move(list));
    } else if (v.isDevice()) {
      if (!device_arg) device_arg = stand_in(v.toDevice());
      args.push_back(to_arg(v, a.real_type(), op_name));
      meta_stack.emplace_back(c10::Device(c10::kMeta));
    } else if (v.isGenerator()) {
      EMBER_UNSUPPORTED(false) << op_name << ": an explicit torch.Generator argument";
    } else {
      args.push_back(to_arg(v, a.real_type(), op_name));
      // pin_memory has no meaning on meta tensors; the meta kernel gets symbolic ints as their
      // hints.
      meta_stack.emplace_back(a.name() == "pin_memory" ? c10::IValue() : at_hints(v));
    }
  }
  c10::Device out_device =
      device_arg.value_or(tensor_device.value_or(scalar_device.value_or(c10::Device(c10::kCPU))));

  {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    try {
      call_meta_cached(op, meta_stack);
    } catch (const c10::NotImplementedError&) {
      meta_stack = run_on_zeros(op, c10::ArrayRef<c10::IValue>(stack->data() + base, num_args));
    }
    if (meta_stack.size() == 1 && meta_stack[0].isTensor()) {
      at::Tensor result = meta_stack[0].toTensor();
      convolution_layout(op, c10::ArrayRef<c10::IValue>(stack->data() + base, num_args), result);
      meta_stack[0] = std::move(result);
    }
  }
  torch::jit::drop(*stack, num_args);

  // Results: one graph value per defined tensor, in order; non-tensor results (sizes computed
  // from metadata) pass through unchanged.
  std::vector<graph::TensorType> out_types;
  std::vector<at::Tensor> out_metas;
  std::vector<int32_t> slots;
  int32_t slot = 0;
  for (const c10::IValue& r : meta_stack) {
    for_each_tensor(r, [&](const at::Tensor& t) {
      int32_t this_slot = slot++;
      if (!t.defined()) return;
      out_types.push_back(tensor_type(t, out_device));
      out_metas.push_back(t);
      slots.push_back(this_slot);
    });
  }
  graph::OpInfo info = op_info(schema);
  if (symbolic() && reads_symbols(graph_, args)) {
    // Results of an op that reads a symbolic size: their types as expressions (the rules check
    // themselves against the meta kernel's types at the hints).
    out_types = graph::symbolic_result_types(graph_, info, args, out_types, size_guards_,
                                             op.hasTag(at::Tag::pointwise), slots);
    // Int results (the lengths flash attention returns) as symbolic ints over the same symbols.
    std::vector<int64_t> ints;
    for (const c10::IValue& r : meta_stack) {
      if (r.isInt()) {
        ints.push_back(r.toInt());
        continue;
      }
      EMBER_UNSUPPORTED(r.isTensor() || r.isTensorList() || r.isNone())
          << op_name << " returns a " << r.tagKind() << " computed from symbolic sizes";
    }
    if (!ints.empty()) {
      const std::vector<graph::DimExpr> exprs =
          graph::symbolic_int_results(graph_, info, args, ints);
      size_t k = 0;
      for (c10::IValue& r : meta_stack) {
        if (r.isInt()) r = c10::IValue(to_symint(exprs[k++], &size_guards_));
      }
    }
  }
  int32_t op_index = graph_.intern_op(info);
  int32_t node = graph_.add_node(op_index, std::move(args), std::move(out_types));
  if (slot != static_cast<int32_t>(slots.size()))
    graph_.nodes[node].result_slots = std::move(slots);
  const std::vector<graph::ValueId>& outs = graph_.nodes[node].outputs;

  size_t next = 0;
  auto wrap = [&](const at::Tensor& t) -> at::Tensor {
    if (!t.defined()) return t;
    EMBER_INTERNAL_ASSERT(next < outs.size()) << op_name << ": result count";
    size_t k = next++;
    at::Tensor tracer = make_tracer(this, outs[k], out_metas[k], out_device);
    return wrap_functional ? fz::to_functional_tensor(tracer) : tracer;
  };
  for (c10::IValue& r : meta_stack) {
    if (r.isTensor()) {
      stack->emplace_back(wrap(r.toTensor()));
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> l;
      for (at::Tensor t : r.toTensorList()) l.push_back(wrap(t));
      stack->emplace_back(l);
    } else {
      stack->push_back(std::move(r));
    }
  }
}

const at::Tensor* TraceSession::functional_input_holding(const at::Tensor& t) const {
  if (!t.defined() || as_tracer(t) == nullptr) return nullptr;
  for (const at::Tensor& fin : functional_inputs_) {
    if (fz::from_functional_tensor(fin).unsafeGetTensorImpl() == t.unsafeGetTensorImpl()) {
      return &fin;
    }
  }
  return nullptr;
}

void TraceSession::update_input(const at::Tensor& input, const at::Tensor& value) {
  fz::replace_(input, value);
  fz::commit_update(input);
  fz::sync(input);
}

graph::ValueId TraceSession::aliased_view_of_mutated_input(const at::Tensor& out) {
  // A functional view shares its FunctionalStorageImpl with its base. In eager the output is a
  // view of the input, so it must see the input's mutation: rebuild it from the input with
  // as_strided, which runs before the mutation is applied and aliases the input's memory.
  const c10::StorageImpl* storage =
      out.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl();
  for (size_t i = 0; i < functional_inputs_.size(); ++i) {
    const at::Tensor& fin = functional_inputs_[i];
    if (fin.unsafeGetTensorImpl()->unsafe_storage().unsafeGetStorageImpl() != storage) continue;
    graph::ValueId input = graph_.inputs[functional_input_index_[i]].value;
    bool mutated = false;
    for (const graph::Mutation& m : graph_.mutations) mutated |= m.input == input;
    if (!mutated) return -1;
    auto handle = c10::Dispatcher::singleton().findSchemaOrThrow("aten::as_strided", "");
    graph::TensorType type = tensor_type(out, fin.device());
    std::vector<graph::Arg> args{graph::ValueRef{input}, graph::int_list_arg(type.sizes),
                                 graph::int_list_arg(type.strides),
                                 graph::int_arg(type.storage_offset)};
    int32_t node = graph_.add_node(graph_.intern_op(op_info(handle.schema())), std::move(args),
                                   {std::move(type)});
    return graph_.nodes[node].outputs[0];
  }
  return -1;
}

TracedGraph TraceSession::finish(const std::vector<at::Tensor>& traced_outputs) {
  EMBER_INTERNAL_ASSERT(!finished_) << "finish called twice";
  bool was_active = active_;
  if (!was_active) enter();
  struct ExitOnReturn {
    TraceSession* s;
    bool was_active;
    ~ExitOnReturn() {
      if (!was_active) s->exit();
    }
  } exit_guard{this, was_active};

  // Convolutions were recorded channels-last on contiguous inputs (conv_layout.h): a 4D output
  // that came out channels-last goes back to the contiguous layout eager gives it.
  std::vector<at::Tensor> outputs = traced_outputs;
  if (channels_last_from_contiguous_) {
    for (at::Tensor& out : outputs) {
      if (!out.defined() || out.dim() != 4 || out.is_contiguous() ||
          !out.is_contiguous(at::MemoryFormat::ChannelsLast)) {
        continue;
      }
      bool input = false;
      for (const at::Tensor& fin : functional_inputs_) {
        input |= fin.unsafeGetTensorImpl() == out.unsafeGetTensorImpl();
      }
      if (!input) out = out.contiguous();
    }
  }

  // Inputs: bring each functional input up to date; a changed value is a mutation.
  for (size_t i = 0; i < functional_inputs_.size(); ++i) {
    const at::Tensor& fin = functional_inputs_[i];
    const graph::Input& input = graph_.inputs[functional_input_index_[i]];
    fz::sync(fin);
    auto* wrapper = fz::unsafeGetFunctionalWrapper(fin);
    EMBER_UNSUPPORTED(!wrapper->has_metadata_mutation())
        << "the metadata of input '" << input.name
        << "' is mutated (resize_, t_, as_strided_, set_, ...)";
    at::Tensor inner = fz::from_functional_tensor(fin);
    TracerTensorImpl* tr = as_tracer(inner);
    EMBER_INTERNAL_ASSERT(tr != nullptr) << "input " << i << " lost its tracer value";
    if (tr->value() != input.value) {
      graph::ValueId nv = value_of(inner);
      const graph::TensorType& old_t = graph_.type(input.value);
      const graph::TensorType& new_t = graph_.type(nv);
      EMBER_UNSUPPORTED(old_t.dtype == new_t.dtype &&
                        graph::fold_pinned(old_t.sizes, graph_.symbols) ==
                            graph::fold_pinned(new_t.sizes, graph_.symbols))
          << "input '" << input.name << "' is replaced by a tensor of another dtype or shape";
      graph_.mutations.push_back(graph::Mutation{input.value, nv});
    }
  }

  for (const at::Tensor& out : outputs) {
    EMBER_UNSUPPORTED(out.defined()) << "an output is an undefined tensor";
    graph::ValueId v = -1;
    for (size_t i = 0; i < functional_inputs_.size() && v < 0; ++i) {
      if (functional_inputs_[i].unsafeGetTensorImpl() == out.unsafeGetTensorImpl()) {
        v = graph_.inputs[functional_input_index_[i]].value;  // the input, after its mutations
      }
    }
    if (v < 0 && fz::isFunctionalTensor(out)) {
      v = aliased_view_of_mutated_input(out);
    }
    if (v < 0 && fz::isFunctionalTensor(out)) {
      fz::sync(out);
      v = value_of(fz::from_functional_tensor(out));
    } else if (v < 0) {
      v = value_of(out);
    }
    graph_.outputs.push_back(v);
  }
  graph::fold_pinned_symbols(graph_);
  graph::check_graph(graph_);
  finished_ = true;
  functional_inputs_.clear();
  constant_ids_.clear();
  std::vector<sym::SizeGuard> guards = size_guards_.guards();
  return TracedGraph{std::move(graph_), std::move(constants_), std::move(guards)};
}

}  // namespace ember::tracer
