#include "rewrite/matmul_padding.h"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "graph/ops.h"

namespace ember::rewrite {

namespace {

/// Elements per 16 bytes, the alignment cuBLAS's fast kernels need; 0 for other dtypes.
int64_t alignment(at::ScalarType t) {
  switch (t) {
    case at::kBFloat16:
    case at::kHalf:
      return 8;
    case at::kFloat:
      return 4;
    default:
      return 0;
  }
}

int64_t round_up(int64_t x, int64_t a) {
  return (x + a - 1) / a * a;
}

/// Column-major: unit stride along the rows, a leading dimension along the columns.
bool column_major(const at::Tensor& m) {
  return m.stride(-2) == 1 && m.stride(-1) != 1 && m.size(-1) > 1;
}

/// `m` (a matrix or a batch of them) zero-padded to `rows` x `cols`, keeping its orientation.
at::Tensor pad_matrix(const at::Tensor& m, int64_t rows, int64_t cols) {
  const int64_t pr = rows - m.size(-2), pc = cols - m.size(-1);
  if (pr == 0 && pc == 0) return m;
  if (column_major(m)) {
    return at::constant_pad_nd(m.transpose(-2, -1), {0, pr, 0, pc}).transpose(-2, -1);
  }
  return at::constant_pad_nd(m, {0, pc, 0, pr});
}

/// addmm's bias, broadcast against the [rows, cols] product, padded where it spans a padded
/// dimension; nullopt when its shape is not one this handles.
std::optional<at::Tensor> pad_bias(const at::Tensor& bias, int64_t m, int64_t n, int64_t rows,
                                   int64_t cols) {
  if (bias.dim() == 1) {
    if (bias.size(0) == 1) return bias;
    if (bias.size(0) != n) return std::nullopt;
    return cols == n ? bias : at::constant_pad_nd(bias, {0, cols - n});
  }
  if (bias.dim() != 2) return std::nullopt;
  const int64_t r = bias.size(0) == m ? rows : bias.size(0);
  const int64_t c = bias.size(1) == n ? cols : bias.size(1);
  if ((bias.size(0) != m && bias.size(0) != 1) || (bias.size(1) != n && bias.size(1) != 1)) {
    return std::nullopt;
  }
  return pad_matrix(bias, r, c);
}

// Note [Padded products in row blocks]
// A padded product whose columns are sliced off is copied to a contiguous result, eager's
// layout: the padded [m, np] product and the [m, n] result are both alive at the copy. For a
// language model's head that is its logits twice (BertForMaskedLM at batch 16 x 512, bf16: 500 MB
// each; its peak 1.36x eager's on an H100, fp32 1.7x). A result of at least kMinBlockedBytes is
// recorded instead as ember::matmul_sliced(a, b_p, bias_p, n): the product of a (its columns
// padded to kp) and the padded b, plus the padded bias, in blocks of rows, each into one scratch
// block of the padded width and copied into its rows of the contiguous result. The scratch
// block (at most kBlockBytes) is all it holds beside the result; cuBLAS's leading dimensions are
// the padded ones, as before. Inference only (the op has no derivative): under grad mode the
// product is recorded as before. Blocks are whole tiles of 128 rows: Bert's head at batch
// 16 x 512 (bf16, H100) took 1.42 ms in 15 blocks of 546 rows (32 MiB), 1.27 ms in blocks of
// 1024, 1.20 in blocks of 2048, against 1.18 for the padded product and its copy, 0.59 for the
// product alone (scripts/extern_host_probe.py, session 66).
constexpr int64_t kMinBlockedBytes = int64_t{64} << 20;
constexpr int64_t kBlockBytes = int64_t{64} << 20;
constexpr int64_t kMinBlockRows = 256;
constexpr int64_t kBlockRowMultiple = 128;

at::Tensor matmul_sliced(const at::Tensor& a, const at::Tensor& b,
                         const std::optional<at::Tensor>& bias, int64_t n) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0),
              "ember::matmul_sliced: a [m, k] and b [k, np], got ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(n >= 0 && n <= b.size(1), "ember::matmul_sliced: n = ", n, " of ", b.size(1),
              " columns");
  const int64_t m = a.size(0), np = b.size(1);
  at::Tensor out = at::empty({m, n}, a.options());
  if (m == 0 || n == 0) return out;
  const int64_t row_bytes = std::max<int64_t>(1, np * static_cast<int64_t>(a.element_size()));
  const int64_t fit = kBlockBytes / row_bytes / kBlockRowMultiple * kBlockRowMultiple;
  const int64_t rows = std::min(m, std::max(kMinBlockRows, fit));
  at::Tensor block = at::empty({rows, np}, a.options());
  for (int64_t r0 = 0; r0 < m; r0 += rows) {
    const int64_t r = std::min(rows, m - r0);
    at::Tensor t = block.narrow(0, 0, r);
    const at::Tensor part = a.narrow(0, r0, r);
    if (bias.has_value() && bias->defined()) {
      at::addmm_out(t, *bias, part, b);
    } else {
      at::mm_out(t, part, b);
    }
    out.narrow(0, r0, r).copy_(t.narrow(1, 0, n));
  }
  return out;
}

at::Tensor matmul_sliced_meta(const at::Tensor& a, const at::Tensor& b,
                              const std::optional<at::Tensor>& bias, int64_t n) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0) && n <= b.size(1),
              "ember::matmul_sliced: a [m, k], b [k, np], n <= np");
  (void)bias;
  return at::empty({a.size(0), n}, a.options());
}

TORCH_LIBRARY_FRAGMENT(ember, m) {
  m.def("matmul_sliced(Tensor a, Tensor b, Tensor? bias, int n) -> Tensor");
}

TORCH_LIBRARY_IMPL(ember, CompositeExplicitAutograd, m) {
  m.impl("matmul_sliced", matmul_sliced);
}

TORCH_LIBRARY_IMPL(ember, Meta, m) {
  m.impl("matmul_sliced", matmul_sliced_meta);
}

}  // namespace

std::optional<at::Tensor> pad_unaligned_matmul(const c10::OperatorHandle& op,
                                               c10::ArrayRef<c10::IValue> args) {
  const c10::FunctionSchema& schema = op.schema();
  if (!schema.overload_name().empty()) return std::nullopt;
  const graph::OpKind kind = graph::op_kind(schema.name());
  const bool is_addmm = kind == graph::OpKind::addmm;
  if (kind != graph::OpKind::mm && kind != graph::OpKind::bmm && !is_addmm) return std::nullopt;
  const size_t first = is_addmm ? 1 : 0;
  if (args.size() < first + 2 || !args[first].isTensor() || !args[first + 1].isTensor()) {
    return std::nullopt;
  }
  const at::Tensor& a = args[first].toTensor();
  const at::Tensor& b = args[first + 1].toTensor();
  if (!a.defined() || !b.defined() || a.dim() != (kind == graph::OpKind::bmm ? 3 : 2) ||
      a.dim() != b.dim() || a.scalar_type() != b.scalar_type()) {
    return std::nullopt;
  }
  const int64_t align = alignment(a.scalar_type());
  if (align == 0) return std::nullopt;
  const int64_t m = a.size(-2), k = a.size(-1), n = b.size(-1);
  const int64_t batch = a.dim() == 3 ? a.size(0) : 1;
  // Large products only: a small one gains less than the copies cost.
  constexpr int64_t kMinMacs = int64_t{1} << 26;
  if (m <= 1 || k <= 1 || n <= 1 || batch * m * n * k < kMinMacs) return std::nullopt;
  // Leading dimensions: a's is k (row-major) or m (column-major); b's is n or k; the result's n.
  const bool pad_m = m % align != 0 && column_major(a);
  const bool pad_k = k % align != 0;
  const bool pad_n = n % align != 0;
  if (!pad_m && !pad_k && !pad_n) return std::nullopt;
  const int64_t mp = pad_m ? round_up(m, align) : m;
  const int64_t kp = pad_k ? round_up(k, align) : k;
  const int64_t np = pad_n ? round_up(n, align) : n;

  std::optional<at::Tensor> bias;
  if (is_addmm) {
    if (args.size() < 5 || !args[0].isTensor() || !args[0].toTensor().defined()) {
      return std::nullopt;
    }
    bias = pad_bias(args[0].toTensor(), m, n, mp, np);
    if (!bias.has_value()) return std::nullopt;
  }
  at::Tensor a_p = pad_matrix(a, mp, kp);
  at::Tensor b_p = pad_matrix(b, kp, np);
  const bool unit_scales =
      !is_addmm || (args[3].toScalar().equal(1) && args[4].toScalar().equal(1));
  if (pad_n && a.dim() == 2 && !pad_m && unit_scales && !at::GradMode::is_enabled() &&
      (!bias.has_value() || bias->dim() == 1) &&
      m * n * static_cast<int64_t>(a.element_size()) >= kMinBlockedBytes) {
    // Note [Padded products in row blocks]
    static const c10::OperatorHandle sliced =
        c10::Dispatcher::singleton().findSchemaOrThrow("ember::matmul_sliced", "");
    std::vector<c10::IValue> stack = {a_p, b_p,
                                      bias.has_value() ? c10::IValue(*bias) : c10::IValue(), n};
    sliced.callBoxed(&stack);
    return stack[0].toTensor();
  }
  at::Tensor out;
  if (is_addmm) {
    out = at::addmm(*bias, a_p, b_p, args[3].toScalar(), args[4].toScalar());
  } else if (a.dim() == 3) {
    out = at::bmm(a_p, b_p);
  } else {
    out = at::mm(a_p, b_p);
  }
  if (mp != m) out = out.narrow(-2, 0, m);
  // Columns sliced off leave rows strided by the padded width: contiguous again, as eager's
  // result (a copy that fuses into the kernel that reads it, or the output's own).
  if (np != n) out = out.narrow(-1, 0, n).contiguous();
  return out;
}

}  // namespace ember::rewrite
