#pragma once

// Note [Max-pool indices saved as window offsets]
// In training, max_pool2d_with_indices' backward reads the int64 index of each output's maximum
// in its input plane, so the min cut saves the indices: ResNet-50's stem pool in bf16 at batch
// 128, 196 MiB, where the pooled values themselves are 49 MiB. Inductor saves a byte per output
// instead, the maximum's offset in its window (_low_memory_max_pool2d_with_offsets). Where the
// reduction rewrites apply (CUDA, or every device with trace.splits_everywhere) and
// a window has at most 127 positions, the tracer records after the pool the offsets
//     off = (h - (oh*sH - pH)) / dH * KW + (w - (ow*sW - pW)) / dW     h, w = idx / W, idx % W
// as int8, and a max_pool2d_with_indices_backward that reads those indices reads instead the
// indices rebuilt from the offsets, recorded there:
//     idx = (oh*sH - pH + (off / KW)*dH) * W + (ow*sW - pW + (off % KW)*dW)
// Both are pointwise: the forward's kernel reads the indices once and writes a byte per output,
// the min cut saves the offsets (an eighth of the bytes), and in the backward a kernel writes
// the indices just before ATen's backward reads them. The program's own use of the indices
// (return_indices=True) still reads the pool's output. Only under grad mode, where a backward
// may follow: under no_grad the offsets would be dead but would still read the indices, which
// keeps the pool an ATen call writing int64 indices instead of a generated kernel.
//
// Note [A max pool's backward from its offsets]
// ATen's backward also reads the pool's input, for its sizes and layout only, and so the min cut
// saves it (ResNet-50's stem: another 196 MiB). Without dilation the backward is recorded instead
// as Inductor lowers it: an input element (h, w) can be the maximum only of the windows
// oh = (h + pH) / sH - i and ow = (w + pW) / sW - j for i < ceil(KH / sH), j < ceil(KW / sW); it
// takes the gradient of each such window inside the output whose offset is its own,
//     dx[h, w] = sum over (i, j) of where(valid & off[oh, ow] == kh*KW + kw, g[oh, ow], 0)
// with kh = h + pH - oh*sH, kw = w + pW - ow*sW, summed in f32 and rounded once (ATen's kernel
// accumulates in its accumulate type too). It is gathers and pointwise ops: one generated kernel
// reads the gradient and the offsets, and nothing reads the input.

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <optional>
#include <utility>

namespace ember::tracer {
class TraceSession;
}

namespace ember::rewrite {

/// A 2D pooling window, and the width of the input planes it walks.
struct PoolWindow {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t width = 1;
};

/// The window of `op` called with `args` when it is a max_pool2d_with_indices on a tracer tensor
/// whose indices are recorded as offsets (above), else nullopt. On CUDA, or on every device with
/// trace.splits_everywhere: the table's device predicate, not checked here.
std::optional<PoolWindow> offsets_window(const c10::OperatorHandle& op,
                                         c10::ArrayRef<c10::IValue> args);

/// The offsets of `indices` ([..., OH, OW], int64) in their windows, as int8, recorded.
at::Tensor record_window_offsets(const at::Tensor& indices, const PoolWindow& w);

/// Records the offsets of a pool's `indices` (a tracer tensor of `session`) in window `w`, and
/// keeps them for the pool's backward (the session's rewrite state, by the indices' value).
void note_pool_offsets(tracer::TraceSession& session, const at::Tensor& indices,
                       const PoolWindow& w);

/// The offsets and window noted for `indices` in `session`, or nullptr.
const std::pair<at::Tensor, PoolWindow>* pool_offsets_of(tracer::TraceSession& session,
                                                         const at::Tensor& indices);

/// The int64 indices that `offsets` stand for, recorded.
at::Tensor record_indices_from_offsets(const at::Tensor& offsets, const PoolWindow& w);

/// max_pool2d_with_indices_backward recorded as a gather from the windows that can hold each
/// input element (Note [A max pool's backward from its offsets]): the gradient of `input` (read
/// for its sizes, dtype and layout only) given `grad` of the pool's output and the `offsets` of
/// its maxima. nullopt (nothing recorded) for a dilated window.
std::optional<at::Tensor> record_pool_backward_from_offsets(const at::Tensor& grad,
                                                            const at::Tensor& input,
                                                            const at::Tensor& offsets,
                                                            const PoolWindow& w);

}  // namespace ember::rewrite
