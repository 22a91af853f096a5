#include "codegen/triton/triton_matmul.h"

#include <algorithm>
#include <sstream>

#include "codegen/triton/triton_prelude.h"

namespace ember::codegen {

namespace {

using loop::DType;

bool float_dtype(DType t) {
  return t == DType::Float32 || t == DType::BFloat16 || t == DType::Float16;
}

const char* tl_type(DType t) {
  switch (t) {
    case DType::BFloat16:
      return "tl.bfloat16";
    case DType::Float16:
      return "tl.float16";
    default:
      return "tl.float32";
  }
}

// The last element's offset of an operand with these (batch, rows, cols) sizes and strides.
int64_t last_offset(const std::array<int64_t, 3>& sizes, const std::array<int64_t, 3>& strides) {
  int64_t off = 0;
  for (size_t d = 0; d < 3; ++d) off += (sizes[d] - 1) * strides[d];
  return off;
}

bool offsets_fit_i32(const MatmulSpec& s) {
  const int64_t limit = (int64_t{1} << 31) - 1;
  if (s.conv) {  // the input's last element
    const ConvOperand& v = *s.conv;
    const std::array<int64_t, 4> sizes = {s.m / (v.out_h * v.out_w), v.channels * s.batch, v.height,
                                          v.width};
    int64_t off = 0;
    for (size_t d = 0; d < 4; ++d) {
      if (v.x_strides[d] < 0) return false;
      off += (sizes[d] - 1) * v.x_strides[d];
    }
    if (off > limit) return false;
  }
  const std::array<int64_t, 3> a{s.batch, s.m, s.k}, b{s.batch, s.k, s.n}, c{s.batch, s.m, s.n};
  for (auto [sizes, strides] : {std::pair{a, s.a_strides}, std::pair{b, s.b_strides},
                                std::pair{c, s.out_strides}, std::pair{c, s.bias_strides}}) {
    for (int64_t st : strides) {
      if (st < 0) return false;
    }
    if (last_offset(sizes, strides) > limit) return false;
  }
  return true;
}

int next_pow2(int64_t v, int lo) {
  int p = lo;
  while (p < v) p *= 2;
  return p;
}

}  // namespace

bool matmul_supported(const MatmulSpec& s, std::string* why) {
  auto no = [&](const std::string& w) {
    if (why != nullptr) *why = w;
    return false;
  };
  if (s.batch < 1 || s.m < 1 || s.n < 1 || s.k < 1) return no("an empty product");
  if (s.conv) {
    const ConvOperand& v = *s.conv;
    if (v.out_h < 1 || v.out_w < 1 || s.m % (v.out_h * v.out_w) != 0 ||
        s.k != v.kh * v.kw * v.channels) {
      return no("a convolution's sizes");
    }
  }
  if (!float_dtype(s.a_dtype) || s.b_dtype != s.a_dtype) return no("operands of other dtypes");
  if (s.out_dtype != s.a_dtype && s.out_dtype != DType::Float32) return no("a result dtype");
  if (s.bias_dtype && *s.bias_dtype != s.out_dtype && *s.bias_dtype != DType::Float32) {
    return no("a bias dtype");
  }
  for (const auto& st : {s.a_strides, s.b_strides, s.out_strides, s.bias_strides}) {
    for (int64_t v : st) {
      if (v < 0) return no("a negative stride");
    }
  }
  return true;
}

std::string emit_triton_matmul(const MatmulSpec& s, const std::string& name,
                               const MatmulEpilogue* epilogue) {
  const bool i64 = !offsets_fit_i32(s);
  const std::string cast = i64 ? ".to(tl.int64)" : "";
  auto n = [](int64_t v) { return std::to_string(v); };
  std::ostringstream o;
  o << kTritonPrelude << "\n\n@triton.jit\ndef " << name << "(b_a, b_b, ";
  if (s.bias_dtype) o << "b_bias, ";
  if (epilogue == nullptr) {
    o << "b_c, ";
  } else {
    for (const std::string& b : epilogue->buffers) o << "b_" << b << ", ";
  }
  o << "BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, "
       "GROUP_M: tl.constexpr):\n";
  auto line = [&](const std::string& l) { o << "    " << l << "\n"; };
  line("pid = tl.program_id(0)");
  line("pid_b = tl.program_id(1)" + cast);
  line("grid_m = (" + n(s.m) + " + BLOCK_M - 1) // BLOCK_M");
  line("grid_n = (" + n(s.n) + " + BLOCK_N - 1) // BLOCK_N");
  // Tiles in groups of GROUP_M tile rows: consecutive programs share B's columns in L2.
  line("width = GROUP_M * grid_n");
  line("group = pid // width");
  line("group_size = min(grid_m - group * GROUP_M, GROUP_M)");
  line("pid_m = group * GROUP_M + (pid % width) % group_size");
  line("pid_n = (pid % width) // group_size");
  line("rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)" + cast);
  line("rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)" + cast);
  line("rk = tl.arange(0, BLOCK_K)" + cast);
  // Rows and columns past the end read row M % M (in bounds); their results are not stored.
  line("ram = rm % " + n(s.m));
  line("rbn = rn % " + n(s.n));
  const auto& a = s.a_strides;
  const auto& b = s.b_strides;
  if (s.conv) {
    // A row's output pixel and the top-left corner of its window; the sample's offset.
    const ConvOperand& v = *s.conv;
    line("r_n = ram // " + n(v.out_h * v.out_w));
    line("r_p = ram % " + n(v.out_h * v.out_w));
    line("ih0 = (r_p // " + n(v.out_w) + ") * " + n(v.stride_h) + " - " + n(v.pad_h));
    line("iw0 = (r_p % " + n(v.out_w) + ") * " + n(v.stride_w) + " - " + n(v.pad_w));
    // A grouped convolution: batch b is group b, whose input channels start at b * channels.
    line("a_base = b_a + r_n * " + n(v.x_strides[0]) +
         (s.batch > 1 ? " + pid_b * " + n(v.channels * v.x_strides[1]) : std::string()));
  } else {
    line("a_ptrs = b_a + pid_b * " + n(a[0]) + " + ram[:, None] * " + n(a[1]) +
         " + rk[None, :] * " + n(a[2]));
  }
  line("b_ptrs = b_b + pid_b * " + n(b[0]) + " + rk[:, None] * " + n(b[1]) + " + rbn[None, :] * " +
       n(b[2]));
  line("acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)");
  line("for k0 in range(0, " + n(s.k) + ", BLOCK_K):");
  if (s.conv) {
    // Column k = (kh, kw, c): the input element at the window's (kh, kw), channel c; zero in
    // the padding and past K.
    const ConvOperand& v = *s.conv;
    const std::string in_h = " < " + n(v.height) + ")", in_w = " < " + n(v.width) + ")";
    // Channels a multiple of BLOCK_K (a compile-time test): a tile's columns are one window
    // position's channels, so the position and the padding mask are per row.
    line("    if " + n(v.channels) + " % BLOCK_K == 0:");
    line("        k_t = k0 // " + n(v.channels));
    line("        ih = ih0 + (k_t // " + n(v.kw) + ") * " + n(v.dil_h));
    line("        iw = iw0 + (k_t % " + n(v.kw) + ") * " + n(v.dil_w));
    line("        a_mask = (ih >= 0) & (ih" + in_h + " & (iw >= 0) & (iw" + in_w);
    line("        k_c = k0 % " + n(v.channels) + " + rk");
    line("        a_t = tl.load(a_base[:, None] + (ih * " + n(v.x_strides[2]) + " + iw * " +
         n(v.x_strides[3]) + ")[:, None] + k_c[None, :] * " + n(v.x_strides[1]) +
         ", mask=a_mask[:, None], other=0.0)");
    line("    else:");
    line("        kk = k0 + rk");
    line("        k_c = kk % " + n(v.channels));
    line("        k_t = kk // " + n(v.channels));
    line("        ih = ih0[:, None] + (k_t // " + n(v.kw) + ")[None, :] * " + n(v.dil_h));
    line("        iw = iw0[:, None] + (k_t % " + n(v.kw) + ")[None, :] * " + n(v.dil_w));
    line("        a_mask = (ih >= 0) & (ih" + in_h + " & (iw >= 0) & (iw" + in_w +
         " & (kk[None, :] < " + n(s.k) + ")");
    line("        a_t = tl.load(a_base[:, None] + ih * " + n(v.x_strides[2]) + " + iw * " +
         n(v.x_strides[3]) + " + k_c[None, :] * " + n(v.x_strides[1]) +
         ", mask=a_mask, other=0.0)");
    line("    if " + n(s.k) + " % BLOCK_K == 0:");
    line("        b_t = tl.load(b_ptrs)");
    line("    else:");
    line("        b_t = tl.load(b_ptrs, mask=rk[:, None] < " + n(s.k) + " - k0, other=0.0)");
  } else {
    // K a multiple of BLOCK_K (a compile-time test): no mask along K.
    line("    if " + n(s.k) + " % BLOCK_K == 0:");
    line("        a_t = tl.load(a_ptrs)");
    line("        b_t = tl.load(b_ptrs)");
    line("    else:");
    line("        a_t = tl.load(a_ptrs, mask=rk[None, :] < " + n(s.k) + " - k0, other=0.0)");
    line("        b_t = tl.load(b_ptrs, mask=rk[:, None] < " + n(s.k) + " - k0, other=0.0)");
  }
  const std::string precision =
      s.a_dtype == DType::Float32 ? (s.allow_tf32 ? "\"tf32\"" : "\"ieee\"") : "";
  line("    acc = tl.dot(a_t, b_t, acc" +
       (precision.empty() ? std::string() : ", input_precision=" + precision) + ")");
  if (!s.conv) line("    a_ptrs += BLOCK_K * " + n(a[2]));
  line("    b_ptrs += BLOCK_K * " + n(b[1]));
  line("mask = (rm[:, None] < " + n(s.m) + ") & (rn[None, :] < " + n(s.n) + ")");
  if (s.bias_dtype) {
    const auto& x = s.bias_strides;
    line("acc = acc + tl.load(b_bias + pid_b * " + n(x[0]) + " + rm[:, None] * " + n(x[1]) +
         " + rn[None, :] * " + n(x[2]) + ", mask=mask, other=0.0).to(tl.float32)");
  }
  const auto& c = s.out_strides;
  const std::string offsets =
      "pid_b * " + n(c[0]) + " + rm[:, None] * " + n(c[1]) + " + rn[None, :] * " + n(c[2]);
  if (epilogue != nullptr) {
    // The epilogue's elements are C's, in C's memory order: lin is C's offsets.
    line("lin = " + offsets);
    line("xmask = mask");
    line("acc_c = acc.to(" + std::string(tl_type(s.out_dtype)) + ")");
    o << epilogue->body;
    return o.str();
  }
  line("tl.store(b_c + " + offsets + ", acc.to(" + tl_type(s.out_dtype) + "), mask=mask)");
  return o.str();
}

std::vector<MatmulConfig> matmul_configs(const MatmulSpec& s, bool small) {
  // (block_m, block_n, block_k, group_m, warps, stages): the usual shapes of Inductor's and
  // Triton's tutorial's matrix-product configurations.
  static const std::vector<MatmulConfig> table = {{128, 128, 32, 8, 8, 3}, {64, 128, 32, 8, 4, 4},
                                                  {128, 64, 32, 8, 4, 4},  {64, 64, 64, 8, 4, 3},
                                                  {128, 128, 64, 8, 8, 3}, {32, 32, 32, 8, 4, 2}};
  static const std::vector<MatmulConfig> small_table = {
      {64, 64, 64, 8, 4, 3}, {32, 32, 32, 8, 4, 2}, {64, 128, 32, 8, 4, 4}, {32, 64, 64, 8, 4, 3}};
  const int max_m = next_pow2(s.m, 16), max_n = next_pow2(s.n, 16), max_k = next_pow2(s.k, 16);
  std::vector<MatmulConfig> out;
  for (MatmulConfig c : small ? small_table : table) {
    c.block_m = std::min(c.block_m, max_m);
    c.block_n = std::min(c.block_n, max_n);
    c.block_k = std::min(c.block_k, max_k);
    if (std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  }
  return out;
}

std::array<int64_t, 2> matmul_grid(const MatmulSpec& s, const MatmulConfig& c) {
  const int64_t gm = (s.m + c.block_m - 1) / c.block_m, gn = (s.n + c.block_n - 1) / c.block_n;
  return {gm * gn, s.batch};
}

}  // namespace ember::codegen
