#include "rewrite/matmul_padding.h"

#include <ATen/ops/addmm.h>
#include <ATen/ops/bmm.h>
#include <ATen/ops/constant_pad_nd.h>
#include <ATen/ops/mm.h>

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
