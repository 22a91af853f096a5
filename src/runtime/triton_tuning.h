/// \file
/// Autotuning of generated Triton kernels' launch configurations (codegen/triton_configs.h):
/// timing candidates on the device, and the disk cache of the winners, so that a second process
/// compiles and times nothing (`<EMBER_CACHE_DIR>/triton/tune/<key>.txt`, "block warps rows").
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "codegen/triton/triton_configs.h"

namespace ember::runtime {

/// Whether this libcuda can time kernels (CompileOptions::Triton::autotune asks for it).
bool triton_autotune_usable();

/// The device's name ("NVIDIA H200"), part of a tuning key: a winner holds for one device.
std::string cuda_device_name(int device);

/// The winner remembered on disk for `key`, or nullopt.
std::optional<codegen::TritonConfig> tuned_config(const std::string& key);

/// Remembers `c` for `key` on disk (written under a temporary name, then renamed; an unwritable
/// cache only costs the timing again).
void remember_tuned_config(const std::string& key, const codegen::TritonConfig& c);

/// Whether `stream` (a CUstream) is capturing a CUDA graph (true when the driver cannot say).
bool stream_capturing(void* stream);

/// Milliseconds per call of `launch` on `stream` (a CUstream), the median of a few timed rounds
/// after a warm-up, measured with CUDA events; nullopt when the stream is capturing a CUDA graph
/// or the driver cannot time.
std::optional<double> time_launches(void* stream, const std::function<void()>& launch);

}  // namespace ember::runtime
