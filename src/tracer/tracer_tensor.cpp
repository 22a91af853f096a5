#include "tracer/tracer_tensor.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/as_strided.h>
#include <ATen/ops/empty.h>

#include "support/error.h"
#include "tracer/absent_device_guard.h"
#include "tracer/sym_node.h"
#include "tracer/trace_session.h"

namespace ember::tracer {

namespace {

c10::DispatchKeySet autocast_key_for(c10::Device device) {
  switch (device.type()) {
    case c10::DeviceType::CPU:
      return c10::DispatchKeySet(c10::DispatchKey::AutocastCPU);
    case c10::DeviceType::CUDA:
      return c10::DispatchKeySet(c10::DispatchKey::AutocastCUDA);
    default:
      return c10::DispatchKeySet();
  }
}

}  // namespace

TracerTensorImpl::TracerTensorImpl(TraceSession* session, graph::ValueId value, at::Tensor meta,
                                   c10::Device device)
    // No storage: reading the data of a tracer tensor raises ("doesn't have storage").
    : c10::TensorImpl(c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), meta.dtype(), device),
      session_(session),
      value_(value),
      meta_(std::move(meta)) {
  key_set_ = key_set_ | autocast_key_for(device);
  ensure_device_guard(device.type());  // Note [Tracing for a device this torch lacks]
  const graph::TensorType* type =
      session_ != nullptr && value_ >= 0 &&
              static_cast<size_t>(value_) < session_->graph().values.size()
          ? &session_->graph().type(value_)
          : nullptr;
  if (type != nullptr && !type->is_static()) {
    // Symbolic sizes (issue 35): torch sees SymInts over ember's expressions.
    sym::GuardRecorder* guards = &session_->size_guards();
    std::vector<c10::SymInt> sizes, strides;
    for (const graph::DimExpr& d : type->sizes) sizes.push_back(to_symint(d, guards));
    for (const graph::DimExpr& d : type->strides) strides.push_back(to_symint(d, guards));
    set_sizes_and_strides(sizes, strides, to_symint(type->storage_offset, guards));
  } else {
    set_sizes_and_strides(meta_.sizes(), meta_.strides(), meta_.storage_offset());
  }
}

c10::intrusive_ptr<c10::TensorImpl> TracerTensorImpl::shallow_copy_and_detach(
    const c10::VariableVersion& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<TracerTensorImpl>(session_, value_, meta_, *device_opt_);
  copy_tensor_metadata(this, impl.get(), version_counter, allow_tensor_metadata_change);
  impl->refresh_numel();
  return impl;
}

c10::intrusive_ptr<c10::TensorImpl> TracerTensorImpl::shallow_copy_and_detach(
    c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const {
  auto impl = c10::make_intrusive<TracerTensorImpl>(session_, value_, meta_, *device_opt_);
  copy_tensor_metadata(this, impl.get(), std::move(version_counter), allow_tensor_metadata_change);
  impl->refresh_numel();
  return impl;
}

void TracerTensorImpl::shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) {
  auto* other = dynamic_cast<TracerTensorImpl*>(impl.get());
  EMBER_INTERNAL_ASSERT(other != nullptr) << "shallow_copy_from a non-tracer tensor";
  copy_tensor_metadata(other, this, version_counter(), allow_tensor_metadata_change());
  session_ = other->session_;
  value_ = other->value_;
  meta_ = other->meta_;
  refresh_numel();
}

TracerTensorImpl* as_tracer(const at::Tensor& t) {
  if (!t.defined()) return nullptr;
  return dynamic_cast<TracerTensorImpl*>(t.unsafeGetTensorImpl());
}

at::Tensor make_tracer(TraceSession* session, graph::ValueId value, at::Tensor meta,
                       c10::Device device) {
  return at::Tensor(c10::make_intrusive<TracerTensorImpl>(session, value, std::move(meta), device));
}

at::Tensor meta_like(const at::Tensor& t) {
  if (auto* tr = as_tracer(t)) return tr->meta();
  auto options = t.options().device(c10::kMeta);
  int64_t storage_elems = static_cast<int64_t>(
      t.unsafeGetTensorImpl()->has_storage() ? t.storage().nbytes() / t.itemsize() : 0);
  int64_t needed = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) == 0) {
      needed = 0;
      break;
    }
    needed += (t.size(d) - 1) * t.stride(d);
  }
  if (t.numel() > 0) needed += 1;
  storage_elems = std::max(storage_elems, needed);
  return at::empty({storage_elems}, options).as_strided(t.sizes(), t.strides(), t.storage_offset());
}

}  // namespace ember::tracer
