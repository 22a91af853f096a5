/// \file
/// Matrix products under mode="max-autotune" (and launch-bound ones in every mode but
/// reduce-overhead, Note [Launch-bound products]): an ATen `mm`, `addmm` (beta = alpha = 1),
/// `bmm` or `convolution` step of a graph on one CUDA device also gets the Triton
/// template of codegen/triton/triton_matmul.h, compiled in each of its configurations. The first
/// call times every configuration and the node's own ATen call (cuBLAS, cuDNN) on its operands
/// and keeps the fastest whose result agrees with the library's, remembered on disk like the
/// generated kernels' tuning (`<EMBER_CACHE_DIR>/triton/tune/`), so a second process compiles
/// only the winner (nothing where the library won) and times nothing. A template must beat the
/// library by 3% to be kept.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "codegen/triton/triton_matmul.h"
#include "graph/graph.h"
#include "runtime/triton_runtime.h"

namespace ember::runtime {

/// Where a product's operands are in the graph.
struct MatmulOperands {
  graph::ValueId a = -1, b = -1, bias = -1, out = -1;  ///< bias -1: none
};

/// A pointwise kernel fused after a product (MatmulTemplate's epilogue): its Triton body and the
/// Triton pointer types of its buffers (triton_pointer_type), in order.
struct FusedEpilogue {
  codegen::MatmulEpilogue code;
  std::vector<std::string> signature;
  std::vector<size_t> outputs;  ///< the positions of the kernel's outputs among its buffers
};

class MatmulTemplate {
 public:
  /// The spec of node `n` of `g` when the template computes it: aten::mm, aten::bmm, or
  /// aten::addmm with beta and alpha 1 and a bias that broadcasts to the result; or an
  /// aten::convolution, not transposed, whose weight and result are channels-last (an implicit
  /// GEMM, codegen::ConvOperand, a batch of groups: operands input, weight, bias); f32, bf16 or f16
  /// on a CUDA device (the CPU with `interpret`) with static shapes. `allow_tf32`: f32 products may
  /// use TF32 (torch's setting when the graph is compiled; cuDNN's for a convolution).
  static std::optional<std::pair<codegen::MatmulSpec, MatmulOperands>> spec_of(
      const graph::Graph& g, const graph::Node& n, bool allow_tf32, bool interpret = false);

  /// The templates of `specs` run by Triton's interpreter on CPU tensors (through the interpret
  /// hook; tests): the first configuration, kept at the first call when its result agrees with
  /// the ATen call's (no timing).
  static std::vector<std::unique_ptr<MatmulTemplate>> interpreted_all(
      const std::vector<codegen::MatmulSpec>& specs,
      const std::vector<std::optional<FusedEpilogue>>& epilogues = {});

  /// The templates of `specs` on CUDA device `device`, their configurations compiled in one call
  /// of the compile hook. nullptr where no configuration compiled, with the compiler's message in
  /// (*errors)[i].
  /// `epilogues` (empty, or one per spec): a template with one runs through run_fused.
  /// `small`: launch-bound products, timed in codegen::matmul_configs's small configurations.
  static std::vector<std::unique_ptr<MatmulTemplate>> cuda_all(
      const std::vector<codegen::MatmulSpec>& specs, int device, std::vector<std::string>* errors,
      const std::vector<std::optional<FusedEpilogue>>& epilogues = {}, bool small = false);

  /// C = a @ b (+ bias) in a new tensor of the traced layout `out_sizes`/`out_strides`, or
  /// nullopt: the caller runs the node's ATen call instead (cuBLAS won, the operands' strides are
  /// not the traced ones, or the first call could not time: a stream capturing a CUDA graph).
  /// The first call times the configurations and `aten` (which runs the ATen call and returns
  /// its result); a configuration whose result differs from cuBLAS's beyond the accumulation
  /// order and a rounding of the dtype is never kept.
  std::optional<at::Tensor> run(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias,
                                const std::vector<int64_t>& out_sizes,
                                const std::vector<int64_t>& out_strides,
                                const std::function<at::Tensor()>& aten) const;

  /// With an epilogue: the product and the epilogue kernel in one launch. `buffers` are the
  /// kernel's buffers (the product's slot any tensor: the template never reads it; outputs
  /// allocated), `a`, `b`, `bias` the product's operands. False when the caller must run the
  /// product and the kernel instead: unfused won, the operands' strides are not the traced ones,
  /// or the first call could not time (capturing). The first call times the configurations
  /// against `unfused` (the ATen product, then the kernel into the same outputs) and keeps the
  /// fastest whose outputs agree with the unfused ones; it returns false.
  bool run_fused(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias,
                 const std::vector<at::Tensor>& buffers,
                 const std::function<void()>& unfused) const;
  bool fused() const { return epilogue_.has_value(); }

  const codegen::MatmulSpec& spec() const { return spec_; }
  /// After the first call: the kept configuration's index, or -1 when cuBLAS won; -2 before.
  int chosen() const { return chosen_.load(); }

 private:
  MatmulTemplate() = default;
  void launch(size_t config, const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias,
              const at::Tensor& out) const;
  /// One launch on every buffer argument in order (a, b[, bias], then C or the epilogue's).
  void launch_all(size_t config, const std::vector<at::Tensor>& args) const;
  /// The first call's choice, from this process's winners or by timing `candidate` for each
  /// configuration against `baseline`; `agree` says whether a configuration's results do.
  /// Requires mu_ held. Leaves chosen_ at -2 when nothing could be timed (capturing).
  void decide(const std::function<void()>& baseline, const std::function<void()>& after_baseline,
              const std::function<void(size_t)>& candidate,
              const std::function<bool()>& agree) const;
  bool operands_match(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias) const;
  /// TF32 or half-precision results are compared with cuBLAS's more loosely (agrees()).
  bool loose_tolerance() const {
    return spec_.out_dtype != loop::DType::Float32 || spec_.a_dtype != loop::DType::Float32 ||
           spec_.allow_tf32;
  }

  codegen::MatmulSpec spec_;
  std::optional<FusedEpilogue> epilogue_;
  std::vector<codegen::MatmulConfig> configs_;
  std::vector<std::shared_ptr<const LoadedTritonKernel>> loaded_;  ///< per config (null: refused)
  int device_ = 0;
  bool interpret_ = false;
  std::string source_;  ///< the interpreter's module
  std::string tune_key_;
  mutable std::mutex mu_;
  mutable std::atomic<int> chosen_{-2};
};

/// Products timed against cuBLAS in this process, and those whose winner came from disk; how
/// many a template won: for tests and reports.
struct MatmulTemplateStats {
  int64_t timed = 0, remembered = 0, template_won = 0;
};
MatmulTemplateStats matmul_template_stats();

}  // namespace ember::runtime
