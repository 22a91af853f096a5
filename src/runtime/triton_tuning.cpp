#include "runtime/triton_tuning.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

#include <unistd.h>

#include "runtime/cuda_driver.h"
#include "runtime/host_compiler.h"

namespace ember::runtime {

namespace fs = std::filesystem;
using namespace cuda;

namespace {

fs::path tune_path(const std::string& key) {
  return fs::path(cache_dir()).parent_path() / "triton" / "tune" / (key + ".txt");
}

constexpr int kRounds = 5;  // timed rounds per candidate
constexpr int kLaunchesPerRound = 2;

}  // namespace

bool triton_autotune_usable() {
  const Driver& d = driver();
  return d.error.empty() && d.cuEventCreate && d.cuEventRecord && d.cuEventSynchronize &&
         d.cuEventElapsedTime && d.cuEventDestroy && d.cuStreamIsCapturing;
}

std::string cuda_device_name(int device) {
  const Driver& d = driver();
  if (!d.error.empty() || d.cuDeviceGetName == nullptr) return "cuda";
  CUdevice dev = 0;
  char name[256] = {0};
  if (d.cuDeviceGet(&dev, device) != 0 || d.cuDeviceGetName(name, sizeof name - 1, dev) != 0) {
    return "cuda";
  }
  return name;
}

std::optional<codegen::TritonConfig> tuned_config(const std::string& key) {
  std::ifstream in(tune_path(key));
  codegen::TritonConfig c;
  if (!(in >> c.block >> c.num_warps) || c.block <= 0 || c.num_warps <= 0) return std::nullopt;
  if (!(in >> c.rows)) c.rows = 0;  // written before row tiles: none
  return c;
}

void remember_tuned_config(const std::string& key, const codegen::TritonConfig& c) {
  std::error_code ec;
  const fs::path path = tune_path(key);
  fs::create_directories(path.parent_path(), ec);
  if (ec) return;
  const fs::path tmp = path.string() + "." + std::to_string(::getpid()) + ".tmp";
  {
    std::ofstream out(tmp);
    out << c.block << " " << c.num_warps << " " << c.rows << "\n";
    if (!out) return;
  }
  fs::rename(tmp, path, ec);
  if (ec) fs::remove(tmp, ec);
}

bool stream_capturing(void* stream) {
  const Driver& d = driver();
  int capturing = 0;
  return d.cuStreamIsCapturing == nullptr ||
         d.cuStreamIsCapturing(static_cast<CUstream>(stream), &capturing) != 0 || capturing != 0;
}

std::optional<double> time_launches(void* stream, const std::function<void()>& launch) {
  const Driver& d = driver();
  if (stream_capturing(stream)) return std::nullopt;
  CUevent start = nullptr, stop = nullptr;
  if (d.cuEventCreate(&start, 0) != 0) return std::nullopt;
  if (d.cuEventCreate(&stop, 0) != 0) {
    d.cuEventDestroy(start);
    return std::nullopt;
  }
  std::vector<double> rounds;
  launch();  // warm-up: caches, clocks
  for (int r = 0; r < kRounds; ++r) {
    check(d.cuEventRecord(start, stream), "cuEventRecord");
    for (int i = 0; i < kLaunchesPerRound; ++i) launch();
    check(d.cuEventRecord(stop, stream), "cuEventRecord");
    check(d.cuEventSynchronize(stop), "cuEventSynchronize");
    float ms = 0;
    check(d.cuEventElapsedTime(&ms, start, stop), "cuEventElapsedTime");
    rounds.push_back(ms / kLaunchesPerRound);
  }
  d.cuEventDestroy(start);
  d.cuEventDestroy(stop);
  std::nth_element(rounds.begin(), rounds.begin() + kRounds / 2, rounds.end());
  return rounds[kRounds / 2];
}

}  // namespace ember::runtime
