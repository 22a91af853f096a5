"""Counters of what the ember backend did, for tests and reports.

`counters` holds:
  graphs        graphs compiled by ember (traced and run by ember's runtime, or, under
                ember.compile(backend=...), by that backend)
  nodes         ATen nodes in those graphs
  training_graphs  graphs compiled for training (an input requires grad under grad mode): a
                joint forward and backward graph, split and compiled
  fallbacks     graphs that run eagerly instead, each with a reason in `fallback_reasons`
  kernels       generated C++ kernels in compiled graphs (fused groups)
  fused_nodes   ATen nodes that run inside generated kernels
  extern_steps  nodes of compiled graphs that run as ATen calls
  parameter_kernels  kernels of parameters and buffers only (ember.compile's graphs), whose
                outputs are kept across calls while those are unchanged
  fused_attention  eager attention patterns (bmm, softmax, bmm) run as one
                scaled_dot_product_attention call (CUDA graphs)
  causal_attention  attention calls whose constant causal mask became is_causal=True
                (transformers' decoders under compilation)
  view_steps    views made directly from a realized tensor (one per chain of views that an
                output or an ATen call needs)
  folded_nodes  nodes computed once at compile time by constant folding (they depend on no input)
  dynamic_graphs  compiled graphs with shape symbols (one graph for every size in the symbols'
                ranges)
  captured_frames  frames ember.compile captured (each is one graph, counted in graphs): whole,
                   or up to a graph break (the rest of the frame is a resume function, captured
                   as a frame of its own)
  graph_breaks     graph breaks taken, each with a reason in `fallback_reasons`
  eager_frames     frames ember.compile could not capture; they run eagerly, each with a reason
                   in `fallback_reasons`
  double_backward_fallbacks  double backward (create_graph=True) through a compiled training
                   graph, run again eagerly and differentiated by autograd
  codegen_notes    kernels the GPU code generator refused (their nodes run as ATen calls), and
                   graphs that run without generated kernels, each with a reason in
                   `fallback_reasons`
  realigned_launches  Triton launches that first copied a buffer whose address is not a multiple
                   of 16 bytes (a view at an odd offset) to an aligned one: slower, not wrong
                   (Note [Buffers aligned to 16 bytes]; read from the runtime, since the last
                   reset)
"""

from __future__ import annotations

import collections

counters: collections.Counter = collections.Counter()
fallback_reasons: list[str] = []
_realigned_at_reset = 0


def _realigned() -> int:
    from . import _C
    return _C.num_realigned_launches()


def _sync() -> None:
    from . import capture  # the capture compilers report their compiles when metrics are read
    capture.sync_metrics()


def reset() -> None:
    global _realigned_at_reset
    _sync()
    counters.clear()
    fallback_reasons.clear()
    _realigned_at_reset = _realigned()


def snapshot() -> dict:
    """A copy of the counters, with every key present."""
    _sync()
    out = {"graphs": 0, "nodes": 0, "fallbacks": 0, "kernels": 0, "fused_nodes": 0,
           "extern_steps": 0, "parameter_kernels": 0, "fused_attention": 0, "causal_attention": 0, "training_graphs": 0, "view_steps": 0, "folded_nodes": 0, "captured_frames": 0,
           "graph_breaks": 0, "eager_frames": 0, "codegen_notes": 0, "dynamic_graphs": 0,
           "size_guard_failures": 0, "scalar_guard_failures": 0, "per_size_graphs": 0}
    out.update(counters)
    out["realigned_launches"] = _realigned() - _realigned_at_reset
    return out
