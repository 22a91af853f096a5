#include "runtime/triton_runtime.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <map>
#include <mutex>

#include "runtime/cuda_driver.h"
#include "support/error.h"

namespace ember::runtime {

namespace {

using namespace cuda;

TritonHooks& hooks() {
  // Never destroyed: the hooks hold Python callables, which must not be released after the
  // interpreter is finalized.
  static auto* h = new TritonHooks();
  return *h;
}

}  // namespace

void set_triton_hooks(TritonHooks h) {
  hooks() = std::move(h);
}

const TritonHooks& triton_hooks() {
  return hooks();
}

std::string triton_pointer_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return "*fp32";
    case at::kDouble:
      return "*fp64";
    case at::kHalf:
      return "*fp16";
    case at::kBFloat16:
      return "*bf16";
    case at::kLong:
      return "*i64";
    case at::kInt:
      return "*i32";
    case at::kShort:
      return "*i16";
    case at::kChar:
      return "*i8";
    case at::kByte:
      return "*u8";
    case at::kBool:
      return "*i1";
    default:
      EMBER_UNSUPPORTED(false) << "a Triton kernel over " << t << " tensors";
  }
  return "";
}

/// A cubin loaded into the device's context; unloaded when the last kernel using it goes.
struct LoadedTritonKernel {
  TritonBinary binary;
  void* module = nullptr;    ///< CUmodule
  void* function = nullptr;  ///< CUfunction

  LoadedTritonKernel() = default;
  LoadedTritonKernel(const LoadedTritonKernel&) = delete;
  LoadedTritonKernel& operator=(const LoadedTritonKernel&) = delete;
  ~LoadedTritonKernel() {
    if (module != nullptr && driver().cuModuleUnload != nullptr) driver().cuModuleUnload(module);
  }
};

namespace {

/// Kernels loaded by this process, by everything that decides their binary (see load_key).
struct LoadedCache {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<const LoadedTritonKernel>> entries;
};
LoadedCache& loaded_cache() {
  static auto* c = new LoadedCache();  // never destroyed: modules may outlive static teardown
  return *c;
}

std::string load_key(const TritonCompileJob& job) {
  std::string key =
      std::to_string(job.device) + "|" + job.block_param + "=" + std::to_string(job.block) + "|";
  for (const std::string& t : job.signature) key += t + ",";
  return key + "|" + job.name + "|" + job.source;
}

std::shared_ptr<const LoadedTritonKernel> load(TritonBinary binary, int device) {
  ensure_context(device);
  const Driver& d = driver();
  auto l = std::make_shared<LoadedTritonKernel>();
  l->binary = std::move(binary);
  CUmodule mod = nullptr;
  check(d.cuModuleLoadData(&mod, l->binary.cubin.data()), "cuModuleLoadData");
  l->module = mod;
  CUfunction fn = nullptr;
  check(d.cuModuleGetFunction(&fn, mod, l->binary.symbol.c_str()), "cuModuleGetFunction");
  l->function = fn;
  if (l->binary.shared_bytes > 48 * 1024) {
    check(d.cuFuncSetAttribute(fn, kCuFuncAttributeMaxDynamicSharedSize, l->binary.shared_bytes),
          "cuFuncSetAttribute");
  }
  l->binary.cubin.clear();  // loaded: the bytes are not needed any more
  return l;
}

}  // namespace

int64_t num_loaded_triton_modules() {
  LoadedCache& c = loaded_cache();
  std::lock_guard<std::mutex> lock(c.mu);
  int64_t n = 0;
  for (const auto& [key, entry] : c.entries) n += entry.expired() ? 0 : 1;
  return n;
}

std::vector<std::unique_ptr<TritonLaunchable>> TritonLaunchable::cuda_all(
    const std::vector<codegen::TritonKernel>& ks,
    const std::vector<std::vector<at::ScalarType>>& buffer_types, int device,
    std::vector<std::string>* errors) {
  EMBER_UNSUPPORTED(hooks().compile != nullptr)
      << "no Triton compiler (ember._triton was not imported, or triton is missing)";
  EMBER_UNSUPPORTED(driver().error.empty()) << driver().error;
  EMBER_INTERNAL_ASSERT(ks.size() == buffer_types.size()) << "one type list per kernel";
  std::vector<std::unique_ptr<TritonLaunchable>> out;
  std::vector<std::string> keys;
  std::vector<TritonCompileJob> jobs;  // one per distinct kernel not loaded yet
  std::map<std::string, size_t> job_of;
  std::map<std::string, std::shared_ptr<const LoadedTritonKernel>> held;
  std::map<std::string, std::string> failed;  // key -> the compiler's message
  LoadedCache& cache = loaded_cache();
  for (size_t i = 0; i < ks.size(); ++i) {
    std::unique_ptr<TritonLaunchable> l(new TritonLaunchable());
    l->kernel_ = ks[i];
    l->launch_ = codegen::triton_launch(ks[i], {});
    l->device_ = device;
    TritonCompileJob job;
    job.source = ks[i].source;
    job.name = ks[i].name;
    for (at::ScalarType t : buffer_types[i]) job.signature.push_back(triton_pointer_type(t));
    job.signature.push_back("constexpr");
    job.block_param = ks[i].block_param;
    job.block = l->launch_.block;
    job.device = device;
    std::string key = load_key(job);
    if (!held.count(key) && !job_of.count(key)) {
      std::lock_guard<std::mutex> lock(cache.mu);
      auto it = cache.entries.find(key);
      std::shared_ptr<const LoadedTritonKernel> live =
          it == cache.entries.end() ? nullptr : it->second.lock();
      if (live) {
        held[key] = std::move(live);
      } else {
        job_of[key] = jobs.size();
        jobs.push_back(std::move(job));
      }
    }
    keys.push_back(std::move(key));
    out.push_back(std::move(l));
  }
  if (!jobs.empty()) {
    std::vector<TritonBinary> binaries = hooks().compile(jobs);
    EMBER_INTERNAL_ASSERT(binaries.size() == jobs.size())
        << "the compile hook returned " << binaries.size() << " binaries for " << jobs.size()
        << " kernels";
    std::lock_guard<std::mutex> lock(cache.mu);
    for (const auto& [key, j] : job_of) {
      if (!binaries[j].error.empty()) {
        failed[key] = binaries[j].error;
        continue;
      }
      held[key] = load(std::move(binaries[j]), device);
      cache.entries[key] = held[key];
    }
  }
  errors->assign(out.size(), "");
  for (size_t i = 0; i < out.size(); ++i) {
    if (auto f = failed.find(keys[i]); f != failed.end()) {
      (*errors)[i] = f->second;
      out[i].reset();
    } else {
      out[i]->loaded_ = held.at(keys[i]);
    }
  }
  return out;
}

std::unique_ptr<TritonLaunchable> TritonLaunchable::interpreted(const codegen::TritonKernel& k) {
  EMBER_UNSUPPORTED(hooks().interpret != nullptr)
      << "no Triton interpreter (ember._triton was not imported, or triton is missing)";
  std::unique_ptr<TritonLaunchable> l(new TritonLaunchable());
  l->kernel_ = k;
  l->launch_ = codegen::triton_launch(k, {});
  l->interpret_ = true;
  return l;
}

TritonLaunchable::~TritonLaunchable() = default;

void TritonLaunchable::launch(const std::vector<at::Tensor>& buffers) const {
  if (launch_.programs == 0) return;
  if (interpret_) {
    hooks().interpret(kernel_.source, kernel_.name, launch_.programs, kernel_.block_param,
                      launch_.block, buffers);
    return;
  }
  // Arguments: each buffer's device pointer, then Triton's global and profile scratch pointers.
  std::vector<void*> ptrs;
  ptrs.reserve(buffers.size() + 2);
  for (const at::Tensor& t : buffers) ptrs.push_back(t.data_ptr());
  at::Tensor scratch;
  const TritonBinary& binary = loaded_->binary;
  if (binary.global_scratch_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(binary.global_scratch_bytes) * launch_.programs},
                        at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device_));
    ptrs.push_back(scratch.data_ptr());
  } else {
    ptrs.push_back(nullptr);
  }
  ptrs.push_back(nullptr);  // profile scratch
  std::vector<void*> params;
  params.reserve(ptrs.size());
  for (void*& p : ptrs) params.push_back(&p);
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, device_));
  ensure_context(device_);
  EMBER_INTERNAL_ASSERT(launch_.programs <= 0x7fffffff) << "grid too large";
  check(driver().cuLaunchKernel(loaded_->function, static_cast<unsigned>(launch_.programs), 1, 1,
                                static_cast<unsigned>(32 * binary.num_warps), 1, 1,
                                static_cast<unsigned>(binary.shared_bytes), stream.native_handle(),
                                params.data(), nullptr),
        "cuLaunchKernel");
}

}  // namespace ember::runtime
