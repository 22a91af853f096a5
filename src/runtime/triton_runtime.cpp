#include "runtime/triton_runtime.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlfcn.h>

#include <mutex>

#include "support/error.h"

namespace ember::runtime {

namespace {

// --- The CUDA driver API, through dlopen (no CUDA needed to build) -------------------------------

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
constexpr int kCuFuncAttributeMaxDynamicSharedSize =
    8;  // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

struct Driver {
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuCtxGetCurrent)(CUcontext*) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuModuleLoadData)(CUmodule*, const void*) = nullptr;
  CUresult (*cuModuleUnload)(CUmodule) = nullptr;
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*) = nullptr;
  CUresult (*cuFuncSetAttribute)(CUfunction, int, int) = nullptr;
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  std::string error;  ///< why the driver could not be loaded
};

template <typename F>
void bind(void* lib, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr && error.empty()) error = std::string("libcuda has no ") + name;
}

const Driver& driver() {
  static Driver d = [] {
    Driver d;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_GLOBAL);
    if (lib == nullptr) {
      d.error = "libcuda could not be loaded";
      return d;
    }
    bind(lib, "cuInit", d.cuInit, d.error);
    bind(lib, "cuDeviceGet", d.cuDeviceGet, d.error);
    bind(lib, "cuCtxGetCurrent", d.cuCtxGetCurrent, d.error);
    bind(lib, "cuCtxSetCurrent", d.cuCtxSetCurrent, d.error);
    bind(lib, "cuDevicePrimaryCtxRetain", d.cuDevicePrimaryCtxRetain, d.error);
    bind(lib, "cuModuleLoadData", d.cuModuleLoadData, d.error);
    bind(lib, "cuModuleUnload", d.cuModuleUnload, d.error);
    bind(lib, "cuModuleGetFunction", d.cuModuleGetFunction, d.error);
    bind(lib, "cuFuncSetAttribute", d.cuFuncSetAttribute, d.error);
    bind(lib, "cuLaunchKernel", d.cuLaunchKernel, d.error);
    bind(lib, "cuGetErrorString", d.cuGetErrorString, d.error);
    if (d.error.empty() && d.cuInit(0) != 0) d.error = "cuInit failed";
    return d;
  }();
  return d;
}

void check(CUresult r, const char* what) {
  if (r == 0) return;
  const char* msg = nullptr;
  if (driver().cuGetErrorString != nullptr) driver().cuGetErrorString(r, &msg);
  EMBER_INTERNAL_ASSERT(false) << what << " failed: CUDA error " << r << " ("
                               << (msg != nullptr ? msg : "unknown") << ")";
}

/// Makes the device's primary context current on this thread (torch's runtime uses it).
void ensure_context(int device) {
  const Driver& d = driver();
  CUcontext ctx = nullptr;
  check(d.cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
  if (ctx != nullptr) return;
  CUdevice dev = 0;
  check(d.cuDeviceGet(&dev, device), "cuDeviceGet");
  check(d.cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
  check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
}

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

std::unique_ptr<TritonLaunchable> TritonLaunchable::cuda(
    const codegen::TritonKernel& k, const std::vector<at::ScalarType>& buffer_types, int device) {
  EMBER_UNSUPPORTED(hooks().compile != nullptr)
      << "no Triton compiler (ember._triton was not imported, or triton is missing)";
  EMBER_UNSUPPORTED(driver().error.empty()) << driver().error;
  std::unique_ptr<TritonLaunchable> l(new TritonLaunchable());
  l->kernel_ = k;
  l->launch_ = codegen::triton_launch(k, {});
  l->device_ = device;
  std::vector<std::string> signature;
  for (at::ScalarType t : buffer_types) signature.push_back(triton_pointer_type(t));
  signature.push_back("constexpr");
  l->binary_ =
      hooks().compile(k.source, k.name, signature, k.block_param, l->launch_.block, device);
  ensure_context(device);
  const Driver& d = driver();
  CUmodule mod = nullptr;
  check(d.cuModuleLoadData(&mod, l->binary_.cubin.data()), "cuModuleLoadData");
  l->module_ = mod;
  CUfunction fn = nullptr;
  check(d.cuModuleGetFunction(&fn, mod, l->binary_.symbol.c_str()), "cuModuleGetFunction");
  l->function_ = fn;
  if (l->binary_.shared_bytes > 48 * 1024) {
    check(d.cuFuncSetAttribute(fn, kCuFuncAttributeMaxDynamicSharedSize, l->binary_.shared_bytes),
          "cuFuncSetAttribute");
  }
  return l;
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

TritonLaunchable::~TritonLaunchable() {
  if (module_ != nullptr && driver().cuModuleUnload != nullptr) {
    driver().cuModuleUnload(module_);
  }
}

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
  if (binary_.global_scratch_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(binary_.global_scratch_bytes) * launch_.programs},
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
  check(driver().cuLaunchKernel(function_, static_cast<unsigned>(launch_.programs), 1, 1,
                                static_cast<unsigned>(32 * binary_.num_warps), 1, 1,
                                static_cast<unsigned>(binary_.shared_bytes), stream.native_handle(),
                                params.data(), nullptr),
        "cuLaunchKernel");
}

}  // namespace ember::runtime
