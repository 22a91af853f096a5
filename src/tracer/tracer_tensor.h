/// \file
/// Tracer tensors: ember's fake tensors, in C++.
///
/// A TracerTensorImpl reports a device (say cuda:0) and full metadata (dtype, sizes, strides,
/// storage offset) but owns no memory there. Its dispatch key set is the PrivateUse1 backend (with
/// the autograd keys torch derives from it, and the autocast key of the reported device), so every
/// ATen op on it reaches ember's boxed kernel below autograd (src/tracer/dispatch.cpp). The kernel
/// computes output metadata by running the op's meta implementation on `meta()`, a meta tensor
/// with the same geometry, and records the call into the active TraceSession.
/// See docs/design/tracer.md for why this interception mechanism was chosen.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include "graph/graph.h"

namespace ember::tracer {

class TraceSession;

class TracerTensorImpl final : public c10::TensorImpl {
 public:
  /// `meta` gives dtype and geometry; `device` is the device the tensor reports.
  TracerTensorImpl(TraceSession* session, graph::ValueId value, at::Tensor meta,
                   c10::Device device);

  graph::ValueId value() const { return value_; }
  TraceSession* session() const { return session_; }
  const at::Tensor& meta() const { return meta_; }

  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      const c10::VariableVersion& version_counter,
      bool allow_tensor_metadata_change) const override;
  c10::intrusive_ptr<c10::TensorImpl> shallow_copy_and_detach(
      c10::VariableVersion&& version_counter, bool allow_tensor_metadata_change) const override;
  void shallow_copy_from(const c10::intrusive_ptr<c10::TensorImpl>& impl) override;

 private:
  const char* tensorimpl_type_name() const override { return "ember::TracerTensorImpl"; }

  TraceSession* session_;
  graph::ValueId value_;
  at::Tensor meta_;
};

/// The TracerTensorImpl of `t`, or nullptr when `t` is not a tracer tensor (undefined, real, or a
/// functional wrapper: unwrap those first).
TracerTensorImpl* as_tracer(const at::Tensor& t);

/// A new tracer tensor.
at::Tensor make_tracer(TraceSession* session, graph::ValueId value, at::Tensor meta,
                       c10::Device device);

/// A meta tensor with the geometry of `t` (sizes, strides, storage offset, dtype).
at::Tensor meta_like(const at::Tensor& t);

}  // namespace ember::tracer
