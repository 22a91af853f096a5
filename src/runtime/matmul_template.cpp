#include "runtime/matmul_template.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdio>
#include <map>
#include <string_view>

#include "runtime/triton_tuning.h"
#include "sched/node_args.h"
#include "sched/pointwise.h"
#include "support/error.h"
#include "support/hash.h"

namespace ember::runtime {

namespace {

using codegen::MatmulConfig;
using codegen::MatmulSpec;

struct AtomicStats {
  std::atomic<int64_t> timed{0}, remembered{0}, template_won{0};
};
AtomicStats& stats() {
  static AtomicStats s;
  return s;
}

// Winners this process decided, by tuning key: the same product in every layer is timed once.
struct Winners {
  std::mutex mu;
  std::map<std::string, int> chosen;
};
Winners& winners() {
  static auto* w = new Winners();
  return *w;
}

const graph::TensorType* tensor_arg(const graph::Graph& g, const graph::Node& n,
                                    std::string_view name, graph::ValueId* id) {
  const graph::Arg* a = sched::node_arg(g, n, name);
  const auto* r = a ? std::get_if<graph::ValueRef>(a) : nullptr;
  if (r == nullptr) return nullptr;
  *id = r->id;
  return &g.type(r->id);
}

bool is_one(const graph::Arg* a) {
  if (a == nullptr) return false;
  if (const auto* i = std::get_if<int64_t>(a)) return *i == 1;
  if (const auto* d = std::get_if<double>(a)) return *d == 1.0;
  return false;
}

// (batch, rows, cols) strides of a 2D or 3D operand whose sizes are `sizes`; 0 for size-1 dims.
std::array<int64_t, 3> strides3(const std::vector<int64_t>& sizes,
                                const std::vector<int64_t>& strides) {
  std::array<int64_t, 3> out{0, 0, 0};
  const size_t off = 3 - sizes.size();
  for (size_t d = 0; d < sizes.size(); ++d) out[off + d] = sizes[d] == 1 ? 0 : strides[d];
  return out;
}

std::array<int64_t, 3> strides3(const at::Tensor& t) {
  return strides3(t.sizes().vec(), t.strides().vec());
}

// Whether a template's result is cuBLAS's `reference` up to the accumulation order and one
// rounding of the result's dtype, relative to its magnitude; `loose`: TF32 or half precision.
bool agrees(const at::Tensor& got, const at::Tensor& reference, bool loose) {
  if (!reference.defined() || got.sizes() != reference.sizes()) return false;
  const double tol = loose ? 2e-2 : 1e-4;
  at::Tensor r = reference.to(at::kFloat), g = got.to(at::kFloat);
  const double scale = r.abs().max().item<double>() + 1e-30;
  return (g - r).abs().max().item<double>() <= tol * scale && !g.isnan().any().item<bool>();
}

// The template's constexprs under `c`, then `extra` (a launch option, the interpreter's grid).
std::vector<std::pair<std::string, int64_t>> constexprs(
    const MatmulConfig& c, std::vector<std::pair<std::string, int64_t>> extra) {
  std::vector<std::pair<std::string, int64_t>> v = {{"BLOCK_M", c.block_m},
                                                    {"BLOCK_N", c.block_n},
                                                    {"BLOCK_K", c.block_k},
                                                    {"GROUP_M", c.group_m}};
  v.insert(v.end(), extra.begin(), extra.end());
  return v;
}

// Whether a 4D tensor of `sizes` has `strides` wherever a size is not 1.
bool strides_where_sized(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                         const std::array<int64_t, 4>& want) {
  if (sizes.size() != 4 || strides.size() != 4) return false;
  for (size_t d = 0; d < 4; ++d) {
    if (sizes[d] != 1 && strides[d] != want[d]) return false;
  }
  return true;
}

// The channels-last strides of a 4D tensor [n, c, h, w].
std::array<int64_t, 4> channels_last_strides(const std::vector<int64_t>& s) {
  return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]};
}

// aten::convolution as an implicit GEMM (codegen::ConvOperand; a grouped one a batch of them, one
// per group): not transposed, 4D, a channels-last weight and result (the tracer's layout on CUDA),
// static sizes, floats of one dtype; the input in any layout.
std::optional<std::pair<MatmulSpec, MatmulOperands>> conv_spec_of(const graph::Graph& g,
                                                                  const graph::Node& n,
                                                                  bool interpret) {
  const graph::Arg* transposed = sched::node_arg(g, n, "transposed");
  const graph::Arg* groups = sched::node_arg(g, n, "groups");
  if (transposed == nullptr || !std::holds_alternative<bool>(*transposed) ||
      std::get<bool>(*transposed) || groups == nullptr ||
      !std::holds_alternative<int64_t>(*groups) || std::get<int64_t>(*groups) < 1) {
    return std::nullopt;
  }
  const int64_t g_count = std::get<int64_t>(*groups);
  MatmulOperands ops;
  const graph::TensorType* x = tensor_arg(g, n, "input", &ops.a);
  const graph::TensorType* w = tensor_arg(g, n, "weight", &ops.b);
  const graph::TensorType* bias = tensor_arg(g, n, "bias", &ops.bias);
  if (bias == nullptr) {
    ops.bias = -1;
    const graph::Arg* b = sched::node_arg(g, n, "bias");
    if (b == nullptr || !std::holds_alternative<graph::NoneArg>(*b)) return std::nullopt;
  }
  ops.out = n.outputs[0];
  const graph::TensorType& y = g.type(ops.out);
  if (x == nullptr || w == nullptr) return std::nullopt;
  const graph::DeviceKind kind = interpret ? graph::DeviceKind::CPU : graph::DeviceKind::CUDA;
  for (const graph::TensorType* t : {x, w, &y, bias}) {
    if (t == nullptr) continue;
    if (t->device.kind != kind || !t->is_static() || t->dtype != y.dtype) return std::nullopt;
  }
  if (x->sizes.size() != 4 || w->sizes.size() != 4 || y.sizes.size() != 4) return std::nullopt;
  std::optional<loop::DType> dt = sched::to_loop_dtype(y.dtype);
  if (!dt) return std::nullopt;
  const std::vector<int64_t> xs = graph::constant_values(x->sizes),
                             ws = graph::constant_values(w->sizes),
                             ys = graph::constant_values(y.sizes);
  const std::vector<int64_t> xst = graph::constant_values(x->strides);
  auto st = sched::int_pair_arg(sched::node_arg(g, n, "stride")),
       pad = sched::int_pair_arg(sched::node_arg(g, n, "padding")),
       dil = sched::int_pair_arg(sched::node_arg(g, n, "dilation"));
  if (!st || !pad || !dil || ws[1] * g_count != xs[1] || ws[0] % g_count != 0 || ys[0] != xs[0] ||
      ys[1] != ws[0]) {
    return std::nullopt;
  }
  codegen::ConvOperand v;
  v.channels = ws[1], v.height = xs[2], v.width = xs[3], v.kh = ws[2], v.kw = ws[3];
  std::tie(v.stride_h, v.stride_w) = *st;
  std::tie(v.pad_h, v.pad_w) = *pad;
  std::tie(v.dil_h, v.dil_w) = *dil;
  v.out_h = ys[2], v.out_w = ys[3];
  if (v.stride_h < 1 || v.stride_w < 1 || v.pad_h < 0 || v.pad_w < 0 || v.dil_h < 1 ||
      v.dil_w < 1 ||
      v.out_h != (v.height + 2 * v.pad_h - v.dil_h * (v.kh - 1) - 1) / v.stride_h + 1 ||
      v.out_w != (v.width + 2 * v.pad_w - v.dil_w * (v.kw - 1) - 1) / v.stride_w + 1) {
    return std::nullopt;
  }
  for (size_t d = 0; d < 4; ++d) v.x_strides[d] = xs[d] == 1 ? 0 : xst[d];
  if (!strides_where_sized(ws, graph::constant_values(w->strides), channels_last_strides(ws)) ||
      !strides_where_sized(ys, graph::constant_values(y.strides), channels_last_strides(ys))) {
    return std::nullopt;
  }
  // Group b: result channels [b * n, (b + 1) * n), the weight's rows alike.
  MatmulSpec s;
  s.batch = g_count;
  s.m = ys[0] * v.out_h * v.out_w;
  s.n = ws[0] / g_count;
  s.k = v.kh * v.kw * v.channels;
  s.a_dtype = s.b_dtype = s.out_dtype = *dt;
  s.b_strides = {s.n * s.k, 1, s.k};
  s.out_strides = {s.n, ws[0], 1};
  if (bias != nullptr) {
    const std::vector<int64_t> bs = graph::constant_values(bias->sizes);
    const std::vector<int64_t> bst = graph::constant_values(bias->strides);
    if (bs.size() != 1 || bs[0] != ws[0]) return std::nullopt;
    s.bias_dtype = *dt;
    s.bias_strides = {s.n * bst[0], 0, bst[0]};
  }
  // An f32 convolution runs on TF32 where cuDNN may (torch.backends.cudnn.allow_tf32).
  s.allow_tf32 = at::globalContext().allowTF32CuDNN();
  s.conv = v;
  if (!codegen::matmul_supported(s, nullptr)) return std::nullopt;
  return std::make_pair(s, ops);
}

}  // namespace

std::optional<std::pair<MatmulSpec, MatmulOperands>> MatmulTemplate::spec_of(const graph::Graph& g,
                                                                             const graph::Node& n,
                                                                             bool allow_tf32,
                                                                             bool interpret) {
  if (n.op < 0 || n.outputs.size() != 1) return std::nullopt;
  const graph::OpInfo& op = g.op_of(n);
  if (op.is(graph::OpKind::convolution)) return conv_spec_of(g, n, interpret);
  const bool bmm = op.is(graph::OpKind::bmm), addmm = op.is(graph::OpKind::addmm);
  if (!op.is(graph::OpKind::mm) && !bmm && !addmm) return std::nullopt;
  MatmulOperands ops;
  const graph::TensorType* a = tensor_arg(g, n, addmm ? "mat1" : "self", &ops.a);
  const graph::TensorType* b = tensor_arg(g, n, "mat2", &ops.b);
  const graph::TensorType* bias = addmm ? tensor_arg(g, n, "self", &ops.bias) : nullptr;
  ops.out = n.outputs[0];
  const graph::TensorType& c = g.type(ops.out);
  if (a == nullptr || b == nullptr || (addmm && bias == nullptr)) return std::nullopt;
  if (addmm &&
      (!is_one(sched::node_arg(g, n, "beta")) || !is_one(sched::node_arg(g, n, "alpha")))) {
    return std::nullopt;
  }
  const size_t rank = bmm ? 3 : 2;
  for (const graph::TensorType* t : {a, b, &c, bias}) {
    if (t == nullptr) continue;
    const graph::DeviceKind kind = interpret ? graph::DeviceKind::CPU : graph::DeviceKind::CUDA;
    if (t->device.kind != kind || !t->is_static() || t->dtype != c.dtype) {
      return std::nullopt;
    }
  }
  if (a->sizes.size() != rank || b->sizes.size() != rank || c.sizes.size() != rank) {
    return std::nullopt;
  }
  std::optional<loop::DType> dt = sched::to_loop_dtype(c.dtype);  // matmul_supported: floats
  if (!dt) return std::nullopt;
  const std::vector<int64_t> as = graph::constant_values(a->sizes),
                             bs = graph::constant_values(b->sizes),
                             cs = graph::constant_values(c.sizes);
  MatmulSpec s;
  s.batch = bmm ? as[0] : 1;
  s.m = as[rank - 2];
  s.k = as[rank - 1];
  s.n = bs[rank - 1];
  if (bs[rank - 2] != s.k || cs[rank - 2] != s.m || cs[rank - 1] != s.n ||
      (bmm && (bs[0] != s.batch || cs[0] != s.batch))) {
    return std::nullopt;
  }
  s.a_dtype = s.b_dtype = s.out_dtype = *dt;
  s.a_strides = strides3(as, graph::constant_values(a->strides));
  s.b_strides = strides3(bs, graph::constant_values(b->strides));
  s.out_strides = strides3(cs, graph::constant_values(c.strides));
  if (bias != nullptr) {
    const std::vector<int64_t> xs = graph::constant_values(bias->sizes);
    if (xs.empty() || xs.size() > 2 || (xs.back() != 1 && xs.back() != s.n) ||
        (xs.size() == 2 && xs[0] != 1 && xs[0] != s.m)) {
      return std::nullopt;
    }
    s.bias_dtype = *dt;
    s.bias_strides = strides3(xs, graph::constant_values(bias->strides));
  }
  s.allow_tf32 = allow_tf32;
  if (!codegen::matmul_supported(s, nullptr)) return std::nullopt;
  return std::make_pair(s, ops);
}

std::vector<std::unique_ptr<MatmulTemplate>> MatmulTemplate::cuda_all(
    const std::vector<MatmulSpec>& specs, int device, std::vector<std::string>* errors,
    const std::vector<std::optional<FusedEpilogue>>& epilogues, bool small) {
  // Note [Buffers aligned to 16 bytes] (launch_all sees to it).
  static const char* kPointer[] = {"*fp32:16", "*bf16:16", "*fp16:16"};
  auto pointer = [](loop::DType t) {
    return t == loop::DType::BFloat16 ? kPointer[1]
                                      : (t == loop::DType::Float16 ? kPointer[2] : kPointer[0]);
  };
  const std::string device_name = cuda_device_name(device);
  std::vector<std::unique_ptr<MatmulTemplate>> out;
  std::vector<TritonCompileJob> jobs;
  std::vector<std::pair<size_t, size_t>> job_of;  // (spec, config)
  for (size_t i = 0; i < specs.size(); ++i) {
    std::unique_ptr<MatmulTemplate> t(new MatmulTemplate());
    t->spec_ = specs[i];
    t->device_ = device;
    t->configs_ = codegen::matmul_configs(specs[i], small);
    if (i < epilogues.size()) t->epilogue_ = epilogues[i];
    const std::string source = codegen::emit_triton_matmul(
        specs[i], "ember_mm", t->epilogue_ ? &t->epilogue_->code : nullptr);
    std::vector<std::string> signature = {pointer(specs[i].a_dtype), pointer(specs[i].b_dtype)};
    if (specs[i].bias_dtype) signature.push_back(pointer(*specs[i].bias_dtype));
    if (t->epilogue_) {
      signature.insert(signature.end(), t->epilogue_->signature.begin(),
                       t->epilogue_->signature.end());
    } else {
      signature.push_back(pointer(specs[i].out_dtype));
    }
    for (int c = 0; c < 4; ++c) signature.push_back("constexpr");
    Hasher h;
    h.str("ember-matmul-tune-v1").str(device_name).str(source);
    std::vector<TritonCompileJob> own;
    for (size_t c = 0; c < t->configs_.size(); ++c) {
      const MatmulConfig& cfg = t->configs_[c];
      TritonCompileJob job;
      job.source = source;
      job.name = "ember_mm";
      job.signature = signature;
      job.block_param = named_constexprs(constexprs(cfg, {{"num_stages", cfg.num_stages}}));
      job.block = 0;
      job.num_warps = cfg.num_warps;
      job.device = device;
      h.str(job.block_param).i64(cfg.num_warps);
      own.push_back(std::move(job));
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
    t->tune_key_ = hex;
    t->loaded_.resize(t->configs_.size());
    // A winner remembered on disk (position + 1 among [configurations..., the library]): only
    // it is compiled; where the library won, nothing is (no template: the ATen call).
    const int n = static_cast<int>(t->configs_.size());
    std::optional<codegen::TritonConfig> won = tuned_config(t->tune_key_);
    const int pos = won ? won->block - 1 : -1;
    if (pos == n) {
      stats().remembered++;
      out.push_back(nullptr);
      continue;
    }
    for (size_t c = 0; c < own.size(); ++c) {
      if (pos >= 0 && pos < n && static_cast<int>(c) != pos) continue;
      jobs.push_back(std::move(own[c]));
      job_of.emplace_back(i, c);
    }
    out.push_back(std::move(t));
  }
  std::vector<std::string> job_errors;
  std::vector<std::shared_ptr<const LoadedTritonKernel>> loaded =
      load_triton_jobs(jobs, device, &job_errors);
  errors->assign(specs.size(), "");
  for (size_t j = 0; j < jobs.size(); ++j) {
    auto [i, c] = job_of[j];
    out[i]->loaded_[c] = loaded[j];
    if (!job_errors[j].empty()) (*errors)[i] = job_errors[j];
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == nullptr) continue;  // the library's, remembered
    bool any = false;
    for (const auto& l : out[i]->loaded_) any = any || l != nullptr;
    if (!any) {
      out[i].reset();
      continue;
    }
    (*errors)[i].clear();  // a configuration that did not compile is only not timed
    // A configuration remembered on disk, the one compiled above: chosen without timing.
    if (auto won = tuned_config(out[i]->tune_key_); won.has_value()) {
      const int pos = won->block - 1;
      const int n = static_cast<int>(out[i]->configs_.size());
      if (pos >= 0 && pos < n && out[i]->loaded_[pos] != nullptr) {
        out[i]->chosen_ = pos;
        stats().remembered++;
      }
    }
  }
  return out;
}

std::vector<std::unique_ptr<MatmulTemplate>> MatmulTemplate::interpreted_all(
    const std::vector<MatmulSpec>& specs,
    const std::vector<std::optional<FusedEpilogue>>& epilogues) {
  EMBER_UNSUPPORTED(triton_hooks().interpret != nullptr)
      << "no Triton interpreter (ember._triton was not imported, or triton is missing)";
  std::vector<std::unique_ptr<MatmulTemplate>> out;
  for (size_t i = 0; i < specs.size(); ++i) {
    std::unique_ptr<MatmulTemplate> t(new MatmulTemplate());
    t->spec_ = specs[i];
    t->interpret_ = true;
    t->device_ = -1;
    t->configs_ = {codegen::matmul_configs(specs[i]).front()};
    if (i < epilogues.size()) t->epilogue_ = epilogues[i];
    t->source_ = codegen::emit_triton_matmul(specs[i], "ember_mm",
                                             t->epilogue_ ? &t->epilogue_->code : nullptr);
    out.push_back(std::move(t));
  }
  return out;
}

bool MatmulTemplate::operands_match(const at::Tensor& a, const at::Tensor& b,
                                    const at::Tensor* bias) const {
  auto on_device = [&](const at::Tensor& t) {
    if (interpret_) return t.defined() && t.is_cpu();
    return t.defined() && t.is_cuda() && t.device().index() == device_;
  };
  if (!on_device(a) || !on_device(b)) return false;
  if (spec_.conv) {
    // The input at its traced strides, the weight channels-last.
    if (a.dim() != 4 || b.dim() != 4) return false;
    const std::vector<int64_t> xs = a.sizes().vec(), ws = b.sizes().vec();
    std::array<int64_t, 4> want = spec_.conv->x_strides;
    for (size_t d = 0; d < 4; ++d) {
      if (xs[d] == 1) want[d] = a.strides()[d];
    }
    if (!strides_where_sized(xs, a.strides().vec(), want) ||
        !strides_where_sized(ws, b.strides().vec(), channels_last_strides(ws))) {
      return false;
    }
  } else if (strides3(a) != spec_.a_strides || strides3(b) != spec_.b_strides) {
    return false;
  }
  if (spec_.bias_dtype.has_value() != (bias != nullptr)) return false;
  if (bias == nullptr) return true;
  if (!on_device(*bias)) return false;
  if (spec_.conv) {  // [O], group b's from b * n
    if (bias->dim() != 1) return false;
    const int64_t st = bias->stride(0);
    return spec_.bias_strides == std::array<int64_t, 3>{spec_.n * st, 0, st};
  }
  // The bias as the template reads it: broadcast to [m, n].
  std::vector<int64_t> sizes = bias->sizes().vec(), strides = bias->strides().vec();
  return strides3(sizes, strides) == spec_.bias_strides;
}

void MatmulTemplate::launch(size_t config, const at::Tensor& a, const at::Tensor& b,
                            const at::Tensor* bias, const at::Tensor& out) const {
  std::vector<at::Tensor> args = {a, b};
  if (bias != nullptr) args.push_back(*bias);
  args.push_back(out);
  launch_all(config, args);
}

void MatmulTemplate::launch_all(size_t config, const std::vector<at::Tensor>& args) const {
  const MatmulConfig& c = configs_[config];
  const std::array<int64_t, 2> grid = codegen::matmul_grid(spec_, c);
  if (interpret_) {
    // The interpret hook takes the constexprs (and the grid's second axis) in block_param.
    triton_hooks().interpret(source_, "ember_mm", grid[0],
                             named_constexprs(constexprs(c, {{"grid_y", grid[1]}})), 0, args, {});
    return;
  }
  if (!buffers_aligned(args)) {  // Note [Buffers aligned to 16 bytes]
    // a, b and the bias are read; C, or the epilogue's outputs among its buffers, written.
    std::vector<bool> written(args.size(), false);
    if (epilogue_) {
      const size_t first = args.size() - epilogue_->code.buffers.size();
      for (size_t o : epilogue_->outputs) written.at(first + o) = true;
    } else {
      written.back() = true;
    }
    launch_realigned(args, written,
                     [&](const std::vector<at::Tensor>& b) { launch_all(config, b); });
    return;
  }
  std::vector<void*> ptrs;
  ptrs.reserve(args.size() + 2);
  for (const at::Tensor& t : args) ptrs.push_back(t.data_ptr());
  launch_loaded(*loaded_[config], grid[0], grid[1], std::move(ptrs), device_);
}

void MatmulTemplate::decide(const std::function<void()>& baseline,
                            const std::function<void()>& after_baseline,
                            const std::function<void(size_t)>& candidate,
                            const std::function<bool()>& agree) const {
  {
    std::lock_guard<std::mutex> wl(winners().mu);
    if (auto it = winners().chosen.find(tune_key_); it != winners().chosen.end()) {
      chosen_.store(it->second);
      return;
    }
  }
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  void* stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, device_)).native_handle();
  std::optional<double> base = time_launches(stream, baseline);
  if (!base.has_value()) return;  // capturing: decide at a later call
  after_baseline();
  int best = -1;
  double best_ms = *base * 0.97;  // a template must be clearly faster
  for (size_t c = 0; c < configs_.size(); ++c) {
    if (loaded_[c] == nullptr) continue;
    std::optional<double> ms = time_launches(stream, [&] { candidate(c); });
    // Never silently wrong: a configuration whose results are not the baseline's is not kept.
    if (ms.has_value() && *ms < best_ms && agree()) {
      best = static_cast<int>(c);
      best_ms = *ms;
    }
  }
  const int position = best < 0 ? static_cast<int>(configs_.size()) : best;
  remember_tuned_config(tune_key_, codegen::TritonConfig{position + 1, 1});
  stats().timed++;
  if (best >= 0) stats().template_won++;
  chosen_.store(best);
  std::lock_guard<std::mutex> wl(winners().mu);
  winners().chosen[tune_key_] = best;
}

std::optional<at::Tensor> MatmulTemplate::run(const at::Tensor& a, const at::Tensor& b,
                                              const at::Tensor* bias,
                                              const std::vector<int64_t>& out_sizes,
                                              const std::vector<int64_t>& out_strides,
                                              const std::function<at::Tensor()>& aten) const {
  if (chosen_.load() == -1 || !operands_match(a, b, bias)) return std::nullopt;
  at::Tensor out = at::empty_strided(out_sizes, out_strides, a.options().dtype(a.scalar_type()));
  if (interpret_ && chosen_.load() == -2) {
    // No timing in the interpreter: the template, when it computes what the ATen call does.
    std::lock_guard<std::mutex> lock(mu_);
    launch(0, a, b, bias, out);
    chosen_.store(agrees(out, aten(), loose_tolerance()) ? 0 : -1);
    return chosen_.load() == 0 ? std::optional<at::Tensor>(out) : std::nullopt;
  }
  if (chosen_.load() == -2) {
    std::lock_guard<std::mutex> lock(mu_);
    if (chosen_.load() == -2) {
      at::Tensor reference;
      decide([&] { reference = aten(); }, [] {}, [&](size_t c) { launch(c, a, b, bias, out); },
             [&] { return agrees(out, reference, loose_tolerance()); });
    }
    if (chosen_.load() < 0) return std::nullopt;  // cuBLAS won, or not decided (capturing)
  }
  launch(static_cast<size_t>(chosen_.load()), a, b, bias, out);
  return out;
}

bool MatmulTemplate::run_fused(const at::Tensor& a, const at::Tensor& b, const at::Tensor* bias,
                               const std::vector<at::Tensor>& buffers,
                               const std::function<void()>& unfused) const {
  EMBER_INTERNAL_ASSERT(epilogue_.has_value()) << "run_fused of a template with no epilogue";
  if (chosen_.load() == -1 || !operands_match(a, b, bias)) return false;
  std::vector<at::Tensor> args = {a, b};
  if (bias != nullptr) args.push_back(*bias);
  args.insert(args.end(), buffers.begin(), buffers.end());
  if (chosen_.load() >= 0) {
    launch_all(static_cast<size_t>(chosen_.load()), args);
    return true;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (chosen_.load() != -2) return false;  // decided meanwhile: the next call uses it
  std::vector<at::Tensor> reference;
  auto snapshot = [&] {
    reference.clear();
    for (size_t i : epilogue_->outputs) reference.push_back(buffers[i].clone());
  };
  auto agree = [&] {
    for (size_t j = 0; j < epilogue_->outputs.size(); ++j) {
      if (!agrees(buffers[epilogue_->outputs[j]], reference[j], loose_tolerance())) return false;
    }
    return true;
  };
  if (interpret_) {  // no timing in the interpreter: the fused form, when it agrees
    unfused();
    snapshot();
    launch_all(0, args);
    chosen_.store(agree() ? 0 : -1);
    return false;
  }
  decide(
      unfused, snapshot, [&](size_t c) { launch_all(c, args); }, agree);
  return false;  // this call's outputs: the caller runs the product and the kernel
}

MatmulTemplateStats matmul_template_stats() {
  return {stats().timed.load(), stats().remembered.load(), stats().template_won.load()};
}

}  // namespace ember::runtime
