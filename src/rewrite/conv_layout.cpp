#include "rewrite/conv_layout.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "graph/ops.h"

namespace ember::rewrite {

namespace {

constexpr auto kCL = at::MemoryFormat::ChannelsLast;

// Note [Channels-last in ATen's eyes]
// is_contiguous(ChannelsLast) ignores the strides of size-1 dims; the convolutions' layout choice
// (suggest_memory_format) does not: it falls back to NCHW for a stride it finds out of order. A
// depthwise weight [C, 1, k, k] made contiguous is channels-last contiguous (its channel dim has
// size 1) but suggests NCHW, and so does a batch-1 input [1, C, H, W] viewed from tokens
// (`x.transpose(1, 2).view(B, C, H, W)`, DaViT's and CoaT's position convolutions), whose batch
// stride is C. Taking them as channels-last already left such convolutions alone, and eager's
// CPU convolution then copied the input to NCHW (35 copies of 4.7 MB a call in davit_base_fl).

// Whether a convolution sees `t` as channels-last.
bool seen_as_channels_last(const at::Tensor& t) {
  return t.is_contiguous(kCL) && t.suggest_memory_format() == kCL;
}

// Whether some layout of `t`'s sizes is seen as channels-last: not for [N, 1, 1, 1] (a 1x1
// depthwise weight, a per-channel scale), whose channels-last strides are its contiguous ones and
// which ATen takes as NCHW whatever its strides. Restriding such a tensor changes nothing the
// convolution sees, and the rewrite, called again on its own convolution, would restride it
// again without end (a stack overflow in mobileone_s0).
bool can_be_seen_as_channels_last(const at::Tensor& t) {
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3);
  const std::vector<int64_t> strides = {h * w * c, 1, w * c, c};
  return c10::is_channels_last_strides_2d(t.sizes(), strides);
}

// Whether the rewrite leaves `t` as it is: seen as channels-last already, or never.
bool settled(const at::Tensor& t) {
  return seen_as_channels_last(t) || !can_be_seen_as_channels_last(t);
}

// `t` with the strides at::empty gives a channels-last tensor of its sizes, which the
// convolutions see as channels-last: a view when only size-1 dims' strides differ, else a copy.
at::Tensor as_channels_last(const at::Tensor& t) {
  if (!t.is_contiguous(kCL)) return t.contiguous(kCL);
  if (t.suggest_memory_format() == kCL) return t;
  const int64_t n = t.size(0), c = t.size(1), h = t.size(2), w = t.size(3);
  return t.as_strided({n, c, h, w}, {h * w * c, 1, w * c, c}, t.storage_offset());
}

// Note [Grouped convolutions by timing]
// cuDNN's NHWC kernels are faster than its NCHW ones for most convolutions, but for grouped ones
// it depends on the channels per group and the size. bf16, batch 64 on an H100 (eager, ms,
// NCHW / NHWC; scripts/bench_conv_layouts.py): RegNetY-32GF's 3 groups of 232 channels at 28x28
// 0.505 / 0.955 and 6 groups at 14x14 0.287 / 0.512 (on NHWC cuDNN transposes each group with
// tensorTransformGeneric before and after its kernel), but 16 groups at 7x7 0.379 / 0.316;
// NFNet's groups of 128 channels 0.216 / 0.112; ResNeXt's 32 groups of 8 channels 0.130 / 0.076.
// No rule over the group width and the size explained these (cuDNN's engine choice is its own),
// and a grouped convolution recorded as it came (a channels-last input from the 1x1 convolution
// before it, a contiguous weight) ran on NHWC, converting the weight on every call too.
// Depthwise convolutions (one channel per group) are timed too: ConvMixer-1536/20's 9x9 ones
// (1536 channels at 32x32, batch 64, bf16, H100) made the whole model 4x slower than eager under
// both Inductor and ember (eager 167.7 ms, Inductor 702.3, ember 671.5), eager's NCHW against the
// compilers' NHWC. A convolution timed faster on NCHW is recorded with both operands contiguous
// even where they already are, so that no later rewrite (channels_last, which takes depthwise
// convolutions) records it channels-last again. Its row in the rewrite table comes before
// channels_last's: after it, as it was at first, channels_last took every depthwise convolution
// whose weight was not channels-last yet and none was ever timed (ConvMixer-1536/20 stayed 4x
// slower than eager, 647 ms against 161, H100, session 65).
//
// So in inference, where a CUDA device is present, the first trace of a grouped convolution of a
// given shape times cuDNN on both layouts, on scratch tensors of its shapes (warm-up calls
// first, then alternating rounds, the best of each), and records it on the faster: NCHW only when
// it is faster by more than kNchwMargin (NHWC's neighbours are channels-last, and a decision
// that flips between processes on a near tie would change the graph) and saves at least
// kMinSavedSeconds per call. The timing sees the convolution alone, not the layout copies around
// an NCHW one (its input from a channels-last neighbour, its output to the next) nor their
// launches, which cost more than a small convolution saves: with the depthwise convolutions of
// MobileNet-V2/V3, EfficientNet-B0, ShuffleNet-V2 and ConvNeXt-T timed at batch 1 (a few us per
// call, NCHW ahead on some), batch-1 latency got worse under CUDA graphs (MobileNet-V2 0.85 ms
// against 0.52; H100, bf16) and twice as slow without (3.7 ms against 1.8 for MobileNet-V3),
// while ConvMixer's (ms per call) need NCHW. The decision is kept for
// the process, per shape, stride, padding, dilation, groups, dtype and device. A copy to the
// chosen layout is an op of the graph, fused into the kernel that makes the input; a weight's
// copy is a kernel of parameters only (kept across calls). Under grad mode the convolution is
// left as it is (its backward was not timed), and so it is where no device is present (a trace
// for cuda:0 on a machine without one): plans made there keep the layout the input came in.
constexpr double kNchwMargin = 0.9;
constexpr double kMinSavedSeconds = 20e-6;  // two activation copies and their launches, about
constexpr int kTimedCalls = 3;              // calls per round
constexpr int kRounds = 3;

// Set while a convolution timed faster on NCHW is recorded on contiguous operands (the call goes
// through the tracer's rewrites again): that call is recorded as it is, neither timed again (on
// operands that were contiguous already it would call itself forever) nor taken channels-last.
thread_local bool recording_as_timed = false;

struct GroupedConvolution {
  std::vector<int64_t> input, weight, stride, padding, dilation;
  int64_t groups = 1;
  at::ScalarType dtype = at::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
};

std::string key_of(const GroupedConvolution& c) {
  std::ostringstream os;
  auto list = [&](const std::vector<int64_t>& v) {
    for (int64_t x : v) os << x << ',';
    os << ';';
  };
  list(c.input);
  list(c.weight);
  list(c.stride);
  list(c.padding);
  list(c.dilation);
  os << c.groups << ';' << static_cast<int>(c.dtype) << ';' << c.device.str();
  return os.str();
}

// Seconds per call of the convolution `c` on NCHW operands and on NHWC ones: the best of kRounds
// rounds of each, each kTimedCalls calls between device synchronizations.
std::vector<double> time_layouts(const GroupedConvolution& c) {
  // Real tensors of the device, outside the trace: no autograd, no autocast.
  at::NoGradGuard no_grad;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
  const at::TensorOptions o = at::TensorOptions().dtype(c.dtype).device(c.device);
  const at::Tensor x = at::empty(c.input, o).uniform_(-1, 1);
  const at::Tensor w = at::empty(c.weight, o).uniform_(-0.1, 0.1);
  const std::vector<at::Tensor> xs = {x, x.contiguous(kCL)};
  const std::vector<at::Tensor> ws = {w, w.contiguous(kCL)};
  const std::vector<int64_t> no_padding(c.stride.size(), 0);
  auto call = [&](size_t layout) {
    return at::convolution(xs[layout], ws[layout], std::nullopt, c.stride, c.padding, c.dilation,
                           /*transposed=*/false, no_padding, c.groups);
  };
  for (size_t layout = 0; layout < 2; ++layout) call(layout);  // cuDNN's choices, made once
  std::vector<double> best(2, 1e30);
  for (int round = 0; round < kRounds; ++round) {
    for (size_t layout = 0; layout < 2; ++layout) {
      hooks.deviceSynchronize(c.device.index());
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kTimedCalls; ++i) call(layout);
      hooks.deviceSynchronize(c.device.index());
      const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
      best[layout] = std::min(best[layout], dt.count() / kTimedCalls);
    }
  }
  return best;
}

// Whether cuDNN runs `c` faster on NCHW operands than on NHWC ones (by the margin above); nullopt
// when the timing failed (out of memory, a cuDNN error): the convolution is then left alone.
std::mutex decided_mu;
std::map<std::string, TimedConvolution>& decided() {
  static auto* m = new std::map<std::string, TimedConvolution>();
  return *m;
}

std::optional<bool> nchw_faster(const GroupedConvolution& c) {
  const std::string key = key_of(c);
  std::lock_guard<std::mutex> lock(decided_mu);
  if (auto it = decided().find(key); it != decided().end()) return it->second.nchw;
  std::vector<double> t;
  try {
    t = time_layouts(c);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  const bool nchw = t[0] < kNchwMargin * t[1] && t[1] - t[0] >= kMinSavedSeconds;
  decided().emplace(key, TimedConvolution{key, t[0], t[1], nchw});
  return nchw;
}

}  // namespace

std::optional<at::Tensor> grouped_convolution_by_timing(const c10::OperatorHandle& op,
                                                        c10::ArrayRef<c10::IValue> args,
                                                        bool* from_contiguous) {
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::convolution ||
      !schema.overload_name().empty() || args.size() != 9 || !args[0].isTensor() ||
      !args[1].isTensor() || !args[6].isBool() || !args[8].isInt() || !args[3].isIntList() ||
      !args[4].isIntList() || !args[5].isIntList()) {
    return std::nullopt;
  }
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor& weight = args[1].toTensor();
  if (recording_as_timed || !input.defined() || !weight.defined() || input.dim() != 4 ||
      weight.dim() != 4 || args[6].toBool() || args[8].toInt() <= 1 || !input.device().is_cuda()) {
    return std::nullopt;
  }
  const at::ScalarType t = input.scalar_type();
  if (t != at::kBFloat16 && t != at::kHalf && t != at::kFloat) return std::nullopt;
  if (!at::globalContext().hasCUDA()) return std::nullopt;  // no device to time on
  GroupedConvolution c;
  c.input = input.sizes().vec();
  c.weight = weight.sizes().vec();
  c.stride = args[3].toIntVector();
  c.padding = args[4].toIntVector();
  c.dilation = args[5].toIntVector();
  c.groups = args[8].toInt();
  c.dtype = t;
  c.device = input.device();
  const std::optional<bool> nchw = nchw_faster(c);
  if (!nchw.has_value()) return std::nullopt;
  if (!*nchw) return channels_last_convolution(op, args, from_contiguous, /*grouped=*/true);
  *from_contiguous = false;
  std::vector<c10::IValue> stack(args.begin(), args.end());
  stack[0] = input.contiguous();
  stack[1] = weight.contiguous();
  struct AsTimed {
    AsTimed() { recording_as_timed = true; }
    ~AsTimed() { recording_as_timed = false; }
  } as_timed;
  op.callBoxed(&stack);  // recorded as it is now: both operands are contiguous
  return stack[0].toTensor();
}

std::optional<at::Tensor> channels_last_convolution(const c10::OperatorHandle& op,
                                                    c10::ArrayRef<c10::IValue> args,
                                                    bool* from_contiguous, bool grouped) {
  // convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
  //             groups)
  if (recording_as_timed) return std::nullopt;  // NCHW was timed faster
  const c10::FunctionSchema& schema = op.schema();
  if (graph::op_kind(schema.name()) != graph::OpKind::convolution ||
      !schema.overload_name().empty() || args.size() != 9 || !args[0].isTensor() ||
      !args[1].isTensor() || !args[6].isBool() || !args[8].isInt()) {
    return std::nullopt;
  }
  const at::Tensor& input = args[0].toTensor();
  const at::Tensor& weight = args[1].toTensor();
  if (!input.defined() || !weight.defined() || input.dim() != 4 || weight.dim() != 4 ||
      args[6].toBool()) {
    return std::nullopt;
  }
  const at::ScalarType t = input.scalar_type();
  if (t != at::kBFloat16 && t != at::kHalf && t != at::kFloat) return std::nullopt;
  if (!grouped && args[8].toInt() > 1 && weight.size(1) > 1) return std::nullopt;
  if (settled(input) && settled(weight)) return std::nullopt;
  // Eager's result is channels-last when its input or its weight is (cuDNN's and oneDNN's
  // layout choice): only otherwise do the graph's outputs go back to contiguous.
  *from_contiguous = input.suggest_memory_format() != kCL && weight.suggest_memory_format() != kCL;
  std::vector<c10::IValue> stack(args.begin(), args.end());
  if (!settled(input)) stack[0] = as_channels_last(input);
  if (!settled(weight)) stack[1] = as_channels_last(weight);
  op.callBoxed(&stack);  // recorded as it is now: both operands settled
  return stack[0].toTensor();
}

std::vector<TimedConvolution> timed_convolutions() {
  std::lock_guard<std::mutex> lock(decided_mu);
  std::vector<TimedConvolution> out;
  for (const auto& [key, t] : decided()) out.push_back(t);
  return out;
}

bool cpu_convolutions_use_onednn() {
  return at::hasMKLDNN() && at::globalContext().userEnabledMkldnn();
}

}  // namespace ember::rewrite
