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

namespace {

uint32_t version_of(const at::Tensor& t) {
  return t.unsafeGetTensorImpl()->version_counter().current_version();
}

}  // namespace

CudaGraphRunner::CudaGraphRunner(int device, std::vector<bool> module_state,
                                 std::vector<bool> versioned)
    : device_(device), module_state_(std::move(module_state)), versioned_(std::move(versioned)) {}

CudaGraphRunner::~CudaGraphRunner() = default;

std::string CudaGraphRunner::disabled_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disabled_;
}

int64_t CudaGraphRunner::replays() const {
  std::lock_guard<std::mutex> lock(mu_);
  return replays_;
}

int64_t CudaGraphRunner::recaptures() const {
  std::lock_guard<std::mutex> lock(mu_);
  return recaptures_;
}

void CudaGraphRunner::disable(const std::string& why) {
  disabled_ = why;
  entries_.clear();
  TORCH_WARN("ember: mode=\"reduce-overhead\": a graph runs without a CUDA graph: ", why);
}

bool CudaGraphRunner::capture(Entry& e, const std::vector<at::Tensor>& inputs,
                              const Program& program) {
  if (!hook()) {
    disable("no CUDA graph hook is installed (ember._cudagraphs was not imported)");
    return false;
  }
  if (!cuda::driver().error.empty()) {
    disable(cuda::driver().error);
    return false;
  }
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_));
  e.static_inputs.clear();
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& x = inputs[i];
    if (x.device() != device) {
      disable("input " + std::to_string(i) + " is on " + x.device().str() +
              ", not the graph's device (a replay would read the value it had when captured)");
      return false;
    }
    if (module_state_[i]) {
      e.static_inputs.push_back(x);
    } else {
      at::Tensor s = at::empty_strided(x.sizes(), x.strides(), x.options());
      s.copy_(x);
      e.static_inputs.push_back(std::move(s));
    }
  }
  // The versions the parameter cache's outputs were computed for, if the capture finds them there
  // (Note [Parameter kernels outside the replay]).
  e.versions.assign(inputs.size(), 0);
  for (size_t i = 0; i < versioned_.size() && i < inputs.size(); ++i) {
    if (versioned_[i]) e.versions[i] = version_of(inputs[i]);
  }
  try {
    e.graph = hook()(device_, [&] { e.static_outputs = program(e.static_inputs); });
  } catch (const std::exception& err) {
    disable(std::string("its capture failed: ") + err.what());
    return false;
  }
  if (e.graph.exec == nullptr) {
    disable("the capture returned no graph");
    return false;
  }
  for (size_t o = 0; o < e.static_outputs.size(); ++o) {
    for (const at::Tensor& x : e.static_inputs) {
      if (shares_storage(e.static_outputs[o], x)) {
        disable("output " + std::to_string(o) + " aliases an input");
        return false;
      }
    }
    // Outputs are returned as copies: outputs that share memory would no longer.
    for (size_t p = 0; p < o; ++p) {
      if (shares_storage(e.static_outputs[o], e.static_outputs[p])) {
        disable("outputs " + std::to_string(p) + " and " + std::to_string(o) + " share memory");
        return false;
      }
    }
  }
  return true;
}

std::optional<std::vector<at::Tensor>> CudaGraphRunner::run(const std::vector<at::Tensor>& inputs,
                                                            const Program& program,
                                                            const std::vector<int64_t>& symbols) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!disabled_.empty()) return std::nullopt;
  EMBER_INTERNAL_ASSERT(inputs.size() == module_state_.size())
      << "CUDA graph of " << module_state_.size() << " inputs called with " << inputs.size();
  auto it = entries_.find(symbols);
  if (it == entries_.end()) {
    if (entries_.size() >= kMaxCudaGraphSizes) {
      if (!warned_full_) {
        warned_full_ = true;
        TORCH_WARN(
            "ember: mode=\"reduce-overhead\": a graph over shape symbols has CUDA graphs "
            "for ",
            kMaxCudaGraphSizes, " sizes; calls of other sizes run without one");
      }
      return std::nullopt;
    }
    it = entries_.emplace(symbols, Entry{}).first;
  }
  Entry& e = it->second;
  if (++e.calls == 1) return std::nullopt;  // warm-up: lazily loaded state loads outside capture
  if (e.graph.exec == nullptr && !capture(e, inputs, program)) return std::nullopt;
  bool moved = false;  // module state at another address than the capture read
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& s = e.static_inputs[i];
    if (inputs[i].device() != s.device() || inputs[i].scalar_type() != s.scalar_type() ||
        !inputs[i].sizes().equals(s.sizes())) {
      return std::nullopt;
    }
    moved |= module_state_[i] &&
             (inputs[i].data_ptr() != s.data_ptr() || !inputs[i].strides().equals(s.strides()));
  }
  bool stale = false;  // a parameter updated in place since the capture
  for (size_t i = 0; i < versioned_.size() && i < inputs.size() && !moved; ++i) {
    stale |= versioned_[i] && version_of(inputs[i]) != e.versions[i];
  }
  if (stale) {
    // This call runs the program, which computes those kernels again into the tensors the graph
    // reads (Note [Parameter kernels outside the replay]); the graph stays valid for the
    // versions the parameters have now.
    for (size_t i = 0; i < versioned_.size() && i < inputs.size(); ++i) {
      if (versioned_[i]) e.versions[i] = version_of(inputs[i]);
    }
    return std::nullopt;
  }
  if (moved) {
    if (recaptures_ >= kMaxCudaGraphRecaptures) {
      disable("its parameters or buffers moved to new memory more than " +
              std::to_string(kMaxCudaGraphRecaptures) + " times (each move captures it again)");
      return std::nullopt;
    }
    ++recaptures_;
    e.graph = CapturedCudaGraph{};
    if (!capture(e, inputs, program)) return std::nullopt;
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!module_state_[i] && inputs[i].data_ptr() != e.static_inputs[i].data_ptr()) {
      e.static_inputs[i].copy_(inputs[i]);
    }
  }
  const c10::Device device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device_));
  c10::Stream stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
  cuda::ensure_context(device_);
  cuda::check(cuda::driver().cuGraphLaunch(e.graph.exec, stream.native_handle()), "cuGraphLaunch");
  ++replays_;
  ++total_replays;
  std::vector<at::Tensor> outs;
  outs.reserve(e.static_outputs.size());
  for (const at::Tensor& o : e.static_outputs) outs.push_back(o.defined() ? o.clone() : o);
  return outs;
}

}  // namespace ember::runtime
