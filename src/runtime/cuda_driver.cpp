#include "runtime/cuda_driver.h"

#include <dlfcn.h>

#include "support/error.h"

namespace ember::runtime::cuda {

namespace {

template <typename F>
void bind(void* lib, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr && error.empty()) error = std::string("libcuda has no ") + name;
}

}  // namespace

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
    bind(lib, "cuGraphLaunch", d.cuGraphLaunch, d.error);
    bind(lib, "cuGetErrorString", d.cuGetErrorString, d.error);
    std::string optional;  // a missing one only turns kernel tuning off
    bind(lib, "cuEventCreate", d.cuEventCreate, optional);
    bind(lib, "cuEventRecord", d.cuEventRecord, optional);
    bind(lib, "cuEventSynchronize", d.cuEventSynchronize, optional);
    bind(lib, "cuEventElapsedTime", d.cuEventElapsedTime, optional);
    bind(lib, "cuEventDestroy_v2", d.cuEventDestroy, optional);
    bind(lib, "cuStreamIsCapturing", d.cuStreamIsCapturing, optional);
    bind(lib, "cuDeviceGetName", d.cuDeviceGetName, optional);
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

}  // namespace ember::runtime::cuda
