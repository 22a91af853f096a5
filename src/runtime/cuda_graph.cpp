#include "runtime/cuda_graph.h"

#include <ATen/ops/empty_strided.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Exception.h>

#include <atomic>

#include "runtime/cuda_driver.h"
#include "support/error.h"

namespace ember::runtime {

namespace {

CudaGraphHook& hook() {
  static auto* h = new CudaGraphHook();  // never destroyed: it holds a Python callable
  return *h;
}

std::atomic<int64_t> total_replays{0};

bool shares_storage(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.has_storage() && b.has_storage() &&
         a.storage().unsafeGetStorageImpl() == b.storage().unsafeGetStorageImpl();
}

}  // namespace

int64_t cuda_graph_replays_total() {
  return total_replays.load();
}

void set_cuda_graph_hook(CudaGraphHook h) {
  hook() = std::move(h);
}

CudaGraphRunner::CudaGraphRunner(int device, std::vector<bool> parameters)
    : device_(device), parameters_(std::move(parameters)) {}

CudaGraphRunner::~CudaGraphRunner() = default;

std::string CudaGraphRunner::disabled_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disabled_;
}

int64_t CudaGraphRunner::replays() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replays_;
}

void CudaGraphRunner::disable(const std::string& why) {
  disabled_ = why;
  static_inputs_.clear();
  static_outputs_.clear();
  graph_ = {};
  TORCH_WARN("ember: mode=\"reduce-overhead\": a graph runs without a CUDA graph: ", why);
}

bool CudaGraphRunner::capture(const std::vector<at::Tensor>& inputs, const Program& program) {
  if (!hook()) {
    disable("no CUDA graph hook is installed (ember._cudagraphs was not imported)");
    return false;
  }
  if (!cuda::driver().error.empty()) {
    disable(cuda::driver().error);
    return false;
  }
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_));
  static_inputs_.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& x = inputs[i];
    if (x.device() != device) {
      disable("input " + std::to_string(i) + " is on " + x.device().str() +
              ", not the graph's device (a replay would read the value it had when captured)");
      return false;
    }
    if (parameters_[i]) {
      static_inputs_.push_back(x);
    } else {
      at::Tensor s = at::empty_strided(x.sizes(), x.strides(), x.options());
      s.copy_(x);
      static_inputs_.push_back(std::move(s));
    }
  }
  try {
    graph_ = hook()(device_, [&] { static_outputs_ = program(static_inputs_); });
  } catch (const std::exception& e) {
    disable(std::string("its capture failed: ") + e.what());
    return false;
  }
  if (graph_.exec == nullptr) {
    disable("the capture returned no graph");
    return false;
  }
  for (size_t o = 0; o < static_outputs_.size(); ++o) {
    for (const at::Tensor& x : static_inputs_) {
      if (shares_storage(static_outputs_[o], x)) {
        disable("output " + std::to_string(o) + " aliases an input");
        return false;
      }
    }
    // Outputs are returned as copies: outputs that share memory would no longer.
    for (size_t p = 0; p < o; ++p) {
      if (shares_storage(static_outputs_[o], static_outputs_[p])) {
        disable("outputs " + std::to_string(p) + " and " + std::to_string(o) + " share memory");
        return false;
      }
    }
  }
  return true;
}

std::optional<std::vector<at::Tensor>> CudaGraphRunner::run(const std::vector<at::Tensor>& inputs,
                                                            const Program& program) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!disabled_.empty()) return std::nullopt;
  EMBER_INTERNAL_ASSERT(inputs.size() == parameters_.size())
      << "CUDA graph of " << parameters_.size() << " inputs called with " << inputs.size();
  if (++calls_ == 1) return std::nullopt;  // warm-up: lazily loaded state loads outside capture
  if (graph_.exec == nullptr && !capture(inputs, program)) return std::nullopt;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& s = static_inputs_[i];
    if (inputs[i].device() != s.device() || inputs[i].scalar_type() != s.scalar_type() ||
        !inputs[i].sizes().equals(s.sizes())) {
      return std::nullopt;
    }
    if (parameters_[i] && inputs[i].data_ptr() != s.data_ptr()) return std::nullopt;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!parameters_[i] && inputs[i].data_ptr() != static_inputs_[i].data_ptr()) {
      static_inputs_[i].copy_(inputs[i]);
    }
  }
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_));
  c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
  cuda::ensure_context(device_);
  cuda::check(cuda::driver().cuGraphLaunch(graph_.exec, stream.native_handle()), "cuGraphLaunch");
  ++replays_;
  ++total_replays;
  std::vector<at::Tensor> outs;
  outs.reserve(static_outputs_.size());
  for (const at::Tensor& o : static_outputs_) outs.push_back(o.defined() ? o.clone() : o);
  return outs;
}

}  // namespace ember::runtime
