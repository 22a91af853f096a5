/// \file
/// The CUDA driver API, through a dlopen'd libcuda: building ember needs no CUDA. Used to load
/// and launch generated kernels (triton_runtime.h) and to replay CUDA graphs (cuda_graph.h).
#pragma once

#include <string>

namespace ember::runtime::cuda {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUgraphExec = void*;
using CUevent = void*;
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
  CUresult (*cuGraphLaunch)(CUgraphExec, CUstream) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  // For timing kernels (triton_tuning.h); null where this libcuda lacks them (tuning is then
  // off), which does not make the driver unusable.
  CUresult (*cuEventCreate)(CUevent*, unsigned) = nullptr;
  CUresult (*cuEventRecord)(CUevent, CUstream) = nullptr;
  CUresult (*cuEventSynchronize)(CUevent) = nullptr;
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent) = nullptr;
  CUresult (*cuEventDestroy)(CUevent) = nullptr;
  CUresult (*cuStreamIsCapturing)(CUstream, int*) = nullptr;
  CUresult (*cuDeviceGetName)(char*, int, CUdevice) = nullptr;
  std::string error;  ///< why the driver could not be loaded; empty when it was
};

/// The process's driver, loaded (and cuInit called) on first use.
const Driver& driver();

/// Raises an internal error naming `what` and the driver's message unless `r` is success.
void check(CUresult r, const char* what);

/// Makes the device's primary context current on this thread (torch's runtime uses it).
void ensure_context(int device);

}  // namespace ember::runtime::cuda
