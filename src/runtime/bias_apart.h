/// \file
/// A linear layer's bias added by the kernel that reads the product (Inductor's
/// unfuse_bias_add_to_pointwise).
///
/// `addmm(bias, a, b)` runs on CUDA as cuBLASLt's product with a bias epilogue, and ATen builds
/// that call's descriptors and asks cuBLASLt's heuristic for an algorithm on every call. Where
/// every reader of the product is a pointwise op (a GELU, a residual add before a norm), through
/// views or directly, the node becomes `mm(a, b)` and `add(product, bias)`: the add fuses into
/// the kernel the readers become, so the bias costs nothing on the device either. A product read
/// by anything else (attention's q, k and v, a graph output) keeps its addmm. Off by default
/// (CompileOptions::Runtime::bias_apart, EMBER_BIAS_APART=1).
///
/// Note [Biases apart, measured]
/// scripts/extern_host_probe.py (session 66, an H100's host, chains of ten 768 x 768 linears on
/// [128, 768] bf16 under ember) timed an extern addmm at 28-53 us of host time and an mm at 15,
/// which made this look like 10-30 us saved per linear layer of a transformer at batch 1. In the
/// models it did not show: at batch 1 (latency_probe, ember-capture, one H100, pass on / off)
/// BertForMaskedLM 2.05 / 1.98 ms, GPT2LMHeadModel 2.53 / 3.56 (noisy), ViT 2.31 / 2.35,
/// BartForCausalLM 3.04 / 2.88; the extern steps' host time per call did not drop (Bert 14.9 /
/// 12.4 us each). The chains' addmm times were bimodal between runs (28 and 53 us in the same
/// process), so the probe's gap was likely noise too. Not measured at the harness's batch sizes.
///
/// Values: the product is rounded to its dtype before the bias is added (eager's epilogue adds it
/// before rounding): for halves, one rounding more, a difference of at most one unit in the last
/// place of the result.
#pragma once

#include "tracer/trace_session.h"

namespace ember::runtime {

/// Rewrites `traced` in place: each `aten::addmm` with alpha = beta = 1, a 2D result and a bias
/// of one value per result column ([n] or [1, n]) of the result's dtype, whose result and every
/// view of it (none over shape symbols, which reads a realized value) is read only by pointwise
/// nodes (sched::is_pointwise) and is no graph output or
/// mutation value, becomes `aten::mm` and `aten::add.Tensor` of the bias, both with the
/// addmm's result type. The rewritten graph passes the verifier. Returns the number of products
/// rewritten.
int bias_apart(tracer::TracedGraph& traced);

}  // namespace ember::runtime
