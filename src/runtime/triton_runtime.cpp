#include "runtime/triton_runtime.h"

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <mutex>

#include "runtime/cuda_driver.h"
#include "runtime/executor_internal.h"
#include "runtime/triton_background.h"
#include "runtime/triton_tuning.h"
#include "support/error.h"
#include "support/hash.h"

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

std::string named_constexprs(const std::vector<std::pair<std::string, int64_t>>& values) {
  std::string out;
  for (const auto& [name, value] : values) {
    out += (out.empty() ? "" : ",") + name + "=" + std::to_string(value);
  }
  return out;
}

// Note [Buffers aligned to 16 bytes]
// Every pointer argument of a compiled Triton kernel is declared a multiple of 16 bytes
// ("*bf16:16": tt.divisibility, as Inductor declares the buffers it allocates). Without it Triton
// cannot prove that a block's consecutive elements start on a 16-byte boundary, and loads and
// stores one element per instruction (ld.global.b16 for bf16, where one ld.global.v4.b32 reads
// eight). The buffers ember allocates are aligned (the caching allocator's blocks; arena offsets
// are multiples of 64 bytes); a graph input, or a view at an offset (x[..., 1:]), may not be. So
// each launch ORs its pointers (a few nanoseconds) and, when one is not aligned, runs the kernel on
// an aligned copy of that buffer's bytes, copied back after the launch when the kernel writes it:
// slower, never wrong. Copies of the bytes a layout spans keep overlapping (expanded) layouts and
// aliasing between inputs out of it; a written buffer sharing memory with a read one was already
// the kernel's own business (an output written over its dead input reads each element first).
std::string triton_pointer_type(at::ScalarType t, bool aligned) {
  switch (t) {
    case at::kFloat:
      return aligned ? "*fp32:16" : "*fp32";
    case at::kDouble:
      return aligned ? "*fp64:16" : "*fp64";
    case at::kHalf:
      return aligned ? "*fp16:16" : "*fp16";
    case at::kBFloat16:
      return aligned ? "*bf16:16" : "*bf16";
    case at::kLong:
      return aligned ? "*i64:16" : "*i64";
    case at::kInt:
      return aligned ? "*i32:16" : "*i32";
    case at::kShort:
      return aligned ? "*i16:16" : "*i16";
    case at::kChar:
      return aligned ? "*i8:16" : "*i8";
    case at::kByte:
      return aligned ? "*u8:16" : "*u8";
    case at::kBool:
      return aligned ? "*i1:16" : "*i1";
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

  /// The module loaded under `key` while someone still holds it, else nullptr (hold `mu`).
  std::shared_ptr<const LoadedTritonKernel> live(const std::string& key) const {
    auto it = entries.find(key);
    return it == entries.end() ? nullptr : it->second.lock();
  }
};
LoadedCache& loaded_cache() {
  static auto* c = new LoadedCache();  // never destroyed: modules may outlive static teardown
  return *c;
}

std::string load_key(const TritonCompileJob& job) {
  std::string key = std::to_string(job.device) + "|" + job.block_param + "=" +
                    std::to_string(job.block) + "|w" + std::to_string(job.num_warps) + "|";
  for (const std::string& t : job.signature) key += t + ",";
  return key + "|" + job.name + "|" + job.source;
}

struct AtomicTuningStats {
  std::atomic<int64_t> timed{0};
  std::atomic<int64_t> remembered{0};
};
AtomicTuningStats& tuning_stats() {
  static AtomicTuningStats s;
  return s;
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

// Note [Symbolic Triton kernels]
// A kernel over shape symbols (issue 35) takes each size variable as an i64 argument after its
// buffers. It is compiled once: its block size (and a row tile's rows per program) is chosen at
// the symbols' hints and kept for every size, since the emitted forms mask every block, and only
// the grid follows the sizes (triton_programs at each launch's values). Such a kernel is not
// autotuned: which configuration wins depends on the sizes, and the first call's need not be
// typical. Triton specializes no integer argument here (the signature is given, with no
// divisibility or equal-to-1 attributes), so one binary serves every value.

// Note [Candidates compiled in the background]
// Compiling every candidate configuration of the large kernels (up to six each) and timing them
// at the first launch made up half of a first call on the GPU (swin_s3_base_224: 7.6 s of
// Triton compiles, 3.4 s of timing, in 15.5 s). With TritonTuning::Background a kernel's default
// configuration compiles with the graph, and its other candidates are one request to the
// background thread (triton_background.h) once the defaults have compiled (a kernel whose default
// the compiler refused needs none). The program runs with the defaults meanwhile. At a launch
// after the request is done, the kernel loads its candidates (not while its stream captures a
// CUDA graph: module loads are not allowed then) and times them as a kernel tuned at its first
// launch does; a winner is remembered on disk the same way, so a later process compiles only the
// winner. A CUDA graph captured before that keeps the defaults: mode="reduce-overhead" tunes at
// the first launch instead (pipeline.cpp). ember.finish_compiles() waits for the thread.
// (CompileOptions::Triton::background_tuning, EMBER_TRITON_BACKGROUND_TUNING.)

bool buffers_aligned(const std::vector<at::Tensor>& buffers) {
  uintptr_t bits = 0;
  for (const at::Tensor& t : buffers) {
    if (t.defined()) bits |= reinterpret_cast<uintptr_t>(t.data_ptr());
  }
  return bits % 16 == 0;
}

namespace {

// The bytes `t`'s layout spans, as a 1-D byte tensor over its storage.
at::Tensor spanned_bytes(const at::Tensor& t) {
  const int64_t itemsize = static_cast<int64_t>(t.element_size());
  auto impl = c10::make_intrusive<c10::TensorImpl>(c10::Storage(t.storage()), t.key_set(),
                                                   caffe2::TypeMeta::Make<uint8_t>());
  const int64_t sizes[] = {layout_bytes(t.sizes().vec(), t.strides().vec(), itemsize)};
  const int64_t strides[] = {1};
  impl->set_sizes_and_strides(sizes, strides, t.storage_offset() * itemsize);
  return at::Tensor(std::move(impl));
}

}  // namespace

static std::atomic<int64_t>& realigned_launches() {
  static std::atomic<int64_t> n{0};
  return n;
}

int64_t num_realigned_launches() {
  return realigned_launches().load();
}

void launch_realigned(const std::vector<at::Tensor>& buffers, const std::vector<bool>& written,
                      const std::function<void(const std::vector<at::Tensor>&)>& launch) {
  realigned_launches()++;
  std::vector<at::Tensor> args = buffers;
  std::vector<std::pair<at::Tensor, at::Tensor>> back;  // (the caller's bytes, the copy's)
  for (size_t i = 0; i < args.size(); ++i) {
    const at::Tensor& t = buffers[i];
    if (!t.defined() || t.numel() == 0 || reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0) {
      continue;
    }
    at::Tensor from = spanned_bytes(t);
    at::Tensor bytes = at::empty({from.numel()}, from.options());
    bytes.copy_(from);
    auto impl =
        c10::make_intrusive<c10::TensorImpl>(c10::Storage(bytes.storage()), t.key_set(), t.dtype());
    impl->set_sizes_and_strides(t.sizes(), t.strides(), 0);
    args[i] = at::Tensor(std::move(impl));
    if (i >= written.size() || written[i]) back.emplace_back(std::move(from), std::move(bytes));
  }
  launch(args);
  for (auto& [to, from] : back) to.copy_(from);
}

std::vector<std::unique_ptr<TritonLaunchable>> TritonLaunchable::cuda_all(
    const std::vector<codegen::TritonKernel>& ks,
    const std::vector<std::vector<at::ScalarType>>& buffer_types, int device,
    std::vector<std::string>* errors, TritonTuning tuning,
    const std::vector<loop::Bindings>& hints) {
  EMBER_UNSUPPORTED(hooks().compile != nullptr)
      << "no Triton compiler (ember._triton was not imported, or triton is missing)";
  EMBER_UNSUPPORTED(driver().error.empty()) << driver().error;
  EMBER_INTERNAL_ASSERT(ks.size() == buffer_types.size()) << "one type list per kernel";
  EMBER_INTERNAL_ASSERT(hints.empty() || hints.size() == ks.size()) << "one hint per kernel";
  const bool autotune = tuning != TritonTuning::Off && triton_autotune_usable();
  const bool background = autotune && tuning == TritonTuning::Background;
  const std::string device_name = autotune ? cuda_device_name(device) : "";
  std::vector<std::unique_ptr<TritonLaunchable>> out;
  std::vector<std::vector<std::string>> keys;  // per kernel, per candidate compiled now
  std::vector<TritonCompileJob> jobs;          // one per distinct binary not loaded yet
  std::map<std::string, size_t> job_of;
  std::map<std::string, std::shared_ptr<const LoadedTritonKernel>> held;
  std::map<std::string, std::string> failed;  // key -> the compiler's message
  struct Later {                              // a candidate for the background
    size_t kernel;
    Candidate candidate;
    std::string key;
    TritonCompileJob job;
  };
  std::vector<Later> later;
  LoadedCache& cache = loaded_cache();
  // A module this process still holds, into `held`; false when none is live.
  auto hold_live = [&](const std::string& key) {
    std::lock_guard<std::mutex> lock(cache.mu);
    std::shared_ptr<const LoadedTritonKernel> live = cache.live(key);
    if (!live) return false;
    held[key] = std::move(live);
    return true;
  };
  for (size_t i = 0; i < ks.size(); ++i) {
    std::unique_ptr<TritonLaunchable> l(new TritonLaunchable());
    const loop::Bindings hint = hints.empty() ? loop::Bindings{} : hints[i];
    const bool symbolic = !ks[i].size_vars.empty();
    l->kernel_ = ks[i];
    l->launch_ = codegen::triton_launch(ks[i], hint);
    l->device_ = device;
    std::vector<std::string> signature;
    for (at::ScalarType t : buffer_types[i]) {
      signature.push_back(triton_pointer_type(t, ks[i].aligned));
    }
    for (size_t v = 0; v < ks[i].size_vars.size(); ++v) signature.push_back("i64");
    signature.push_back("constexpr");
    const bool row_tile = !ks[i].rows_param.empty();
    if (row_tile) signature.push_back("constexpr");  // XBLOCK, the rows per program
    std::vector<codegen::TritonConfig> configs =
        autotune && !symbolic ? codegen::triton_configs(ks[i], hint)
                              : std::vector<codegen::TritonConfig>{
                                    {l->launch_.block, 4, row_tile ? ks[i].rows_per_program : 0}};
    if (configs.size() > 1) {
      Hasher h;
      h.str("ember-triton-tune-v1").str(device_name).str(ks[i].name).str(ks[i].source);
      for (const std::string& t : signature) h.str(t);
      for (const codegen::TritonConfig& c : configs) h.i64(c.block).i64(c.num_warps).i64(c.rows);
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h.digest()));
      if (auto won = tuned_config(hex);
          won.has_value() && std::find(configs.begin(), configs.end(), *won) != configs.end()) {
        configs = {*won};
        tuning_stats().remembered++;
      } else {
        l->tune_key_ = hex;
      }
    }
    std::vector<std::string> kernel_keys;
    for (size_t ci = 0; ci < configs.size(); ++ci) {
      const codegen::TritonConfig& c = configs[ci];
      Candidate cand;
      cand.config = c;
      cand.programs = codegen::triton_programs(ks[i], hint, c.block, c.rows);
      TritonCompileJob job;
      job.source = ks[i].source;
      job.name = ks[i].name;
      job.signature = signature;
      job.block_param = ks[i].block_param;
      job.block = c.block;
      if (row_tile) {  // two constexprs (see TritonCompileJob::block_param)
        job.block_param =
            named_constexprs({{ks[i].block_param, c.block}, {ks[i].rows_param, c.rows}});
      }
      job.num_warps = c.num_warps;
      job.device = device;
      std::string key = load_key(job);
      const bool known = held.count(key) || job_of.count(key) || hold_live(key);
      if (background && ci > 0 && !known) {
        later.push_back({i, std::move(cand), std::move(key), std::move(job)});
        continue;
      }
      l->candidates_.push_back(std::move(cand));
      if (!known) {
        job_of[key] = jobs.size();
        jobs.push_back(std::move(job));
      }
      kernel_keys.push_back(std::move(key));
    }
    keys.push_back(std::move(kernel_keys));
    out.push_back(std::move(l));
  }
  if (!jobs.empty()) {
    std::vector<TritonBinary> binaries = hooks().compile(jobs, /*background=*/false);
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
    TritonLaunchable& l = *out[i];
    // The default (first) configuration must compile; another that does not is dropped.
    if (auto f = failed.find(keys[i][0]); f != failed.end()) {
      (*errors)[i] = f->second;
      out[i].reset();
      continue;
    }
    std::vector<Candidate> kept;
    for (size_t c = 0; c < l.candidates_.size(); ++c) {
      if (failed.count(keys[i][c])) continue;
      l.candidates_[c].loaded = held.at(keys[i][c]);
      kept.push_back(std::move(l.candidates_[c]));
    }
    l.candidates_ = std::move(kept);
  }
  // The candidates left for the background: one request, identical binaries once.
  std::vector<TritonCompileJob> background_jobs;
  std::map<std::string, size_t> background_job_of;
  for (Later& c : later) {
    if (out[c.kernel] == nullptr) continue;  // its default was refused
    TritonLaunchable& l = *out[c.kernel];
    if (failed.count(c.key)) continue;
    if (auto h = held.find(c.key); h != held.end()) {  // compiled now for another kernel
      c.candidate.loaded = h->second;
      l.candidates_.push_back(std::move(c.candidate));
      continue;
    }
    auto [it, added] = background_job_of.emplace(c.key, background_jobs.size());
    if (added) background_jobs.push_back(std::move(c.job));
    l.deferred_.push_back({std::move(c.candidate), it->second, std::move(c.key)});
  }
  std::shared_ptr<const BackgroundCompile> request;
  if (!background_jobs.empty()) request = compile_in_background(std::move(background_jobs));
  for (auto& l : out) {
    if (l == nullptr) continue;
    if (!l->deferred_.empty()) l->background_ = request;
    l->tuned_ = l->candidates_.size() == 1 && l->deferred_.empty();
  }
  return out;
}

std::unique_ptr<TritonLaunchable> TritonLaunchable::interpreted(const codegen::TritonKernel& k,
                                                                const loop::Bindings& hint) {
  EMBER_UNSUPPORTED(hooks().interpret != nullptr)
      << "no Triton interpreter (ember._triton was not imported, or triton is missing)";
  std::unique_ptr<TritonLaunchable> l(new TritonLaunchable());
  l->kernel_ = k;
  l->launch_ = codegen::triton_launch(k, hint);
  l->interpret_ = true;
  return l;
}

TritonLaunchable::~TritonLaunchable() = default;

int64_t TritonLaunchable::programs(const Candidate& c, const std::vector<int64_t>& sizes) const {
  if (kernel_.size_vars.empty()) return c.programs;
  EMBER_INTERNAL_ASSERT(sizes.size() == kernel_.size_vars.size())
      << kernel_.name << ": " << sizes.size() << " sizes for " << kernel_.size_vars.size()
      << " size variables";
  loop::Bindings b;
  for (size_t i = 0; i < sizes.size(); ++i) b[kernel_.size_vars[i]] = sizes[i];
  return codegen::triton_programs(kernel_, b, c.config.block, c.config.rows);
}

void TritonLaunchable::launch(const std::vector<at::Tensor>& buffers,
                              const std::vector<int64_t>& sizes) const {
  if (interpret_) {
    Candidate c;
    c.config = {launch_.block, 4, kernel_.rows_param.empty() ? 0 : kernel_.rows_per_program};
    c.programs = launch_.programs;
    const int64_t n = programs(c, sizes);
    if (n == 0) return;
    std::string block_param = kernel_.block_param;
    if (!kernel_.rows_param.empty()) {  // a row tile: its default rows per program too
      block_param = named_constexprs(
          {{kernel_.block_param, launch_.block}, {kernel_.rows_param, kernel_.rows_per_program}});
    }
    hooks().interpret(kernel_.source, kernel_.name, n, block_param, launch_.block, buffers, sizes);
    return;
  }
  if (!tuned_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(tune_mu_);
    if (!tuned_.load(std::memory_order_relaxed) && !tune(buffers)) {
      launch_with(candidates_.front(), buffers, sizes);  // the default, tuned at a later launch
      return;
    }
  }
  launch_with(candidates_.front(), buffers, sizes);
}

bool TritonLaunchable::adopt_background(void* stream) const {
  if (background_ == nullptr) return true;
  if (!background_->done.load(std::memory_order_acquire) || stream_capturing(stream)) return false;
  LoadedCache& cache = loaded_cache();
  std::lock_guard<std::mutex> lock(cache.mu);
  for (Deferred& d : deferred_) {
    const TritonBinary& b = background_->binaries.at(d.job);
    std::shared_ptr<const LoadedTritonKernel> live = cache.live(d.key);
    if (!live) {
      if (!b.error.empty()) continue;  // refused (or dropped at exit): not a candidate
      live = load(b, device_);
      cache.entries[d.key] = live;
    }
    d.candidate.loaded = std::move(live);
    candidates_.push_back(std::move(d.candidate));
  }
  deferred_.clear();
  background_.reset();
  return true;
}

bool TritonLaunchable::tune(const std::vector<at::Tensor>& buffers) const {
  // Candidates still compiling: the default runs, at the cost of one atomic read per launch.
  if (background_ != nullptr && !background_->done.load(std::memory_order_acquire)) return false;
  // Every candidate writes the kernel's outputs; a buffer sharing storage with another (an
  // output written over an input) would make the second launch read what the first wrote.
  for (size_t i = 0; i < buffers.size(); ++i) {
    for (size_t j = i + 1; j < buffers.size(); ++j) {
      // (An empty stand-in for an unused output has no memory: it shares nothing.)
      if (buffers[i].defined() && buffers[j].defined() && buffers[i].storage().data() != nullptr &&
          buffers[i].storage().data() == buffers[j].storage().data()) {
        return false;
      }
    }
  }
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  void* stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, device_)).native_handle();
  ensure_context(device_);
  if (!adopt_background(stream)) return false;
  if (candidates_.size() == 1) {  // every other candidate was refused
    tuned_.store(true, std::memory_order_release);
    return true;
  }
  std::vector<double> ms;
  for (const Candidate& c : candidates_) {
    std::optional<double> t = time_launches(stream, [&] { launch_with(c, buffers, {}); });
    if (!t.has_value()) return false;
    ms.push_back(*t);
  }
  // The default unless another is clearly faster (timing noise must not flip a choice).
  size_t best = 0;
  for (size_t i = 1; i < ms.size(); ++i) {
    if (ms[i] < ms[best] * (best == 0 ? 0.97 : 1.0)) best = i;
  }
  Candidate chosen = candidates_[best];
  candidates_.assign(1, std::move(chosen));  // the others' modules go
  remember_tuned_config(tune_key_, candidates_.front().config);
  tuning_stats().timed++;
  tuned_.store(true, std::memory_order_release);
  return true;
}

void TritonLaunchable::launch_with(const Candidate& c, const std::vector<at::Tensor>& buffers,
                                   const std::vector<int64_t>& sizes) const {
  const int64_t n = programs(c, sizes);
  if (n == 0) return;
  // Arguments: each buffer's device pointer, then the sizes (launch_loaded appends Triton's
  // scratch pointers).
  if (kernel_.aligned && !buffers_aligned(buffers)) {  // Note [Buffers aligned to 16 bytes]
    launch_realigned(buffers, kernel_.written,
                     [&](const std::vector<at::Tensor>& b) { launch_with(c, b, sizes); });
    return;
  }
  std::vector<void*> ptrs;
  ptrs.reserve(buffers.size() + 2);
  for (const at::Tensor& t : buffers) ptrs.push_back(t.data_ptr());
  launch_loaded(*c.loaded, n, 1, std::move(ptrs), device_, sizes);
}

std::vector<std::shared_ptr<const LoadedTritonKernel>> load_triton_jobs(
    const std::vector<TritonCompileJob>& jobs, int device, std::vector<std::string>* errors) {
  EMBER_UNSUPPORTED(hooks().compile != nullptr)
      << "no Triton compiler (ember._triton was not imported, or triton is missing)";
  EMBER_UNSUPPORTED(driver().error.empty()) << driver().error;
  std::vector<std::shared_ptr<const LoadedTritonKernel>> out(jobs.size());
  errors->assign(jobs.size(), "");
  LoadedCache& cache = loaded_cache();
  std::vector<TritonCompileJob> todo;
  std::map<std::string, size_t> todo_of;  // identical jobs compile once
  std::vector<std::string> keys(jobs.size());
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    for (size_t i = 0; i < jobs.size(); ++i) {
      keys[i] = load_key(jobs[i]);
      out[i] = cache.live(keys[i]);
      if (out[i] == nullptr && !todo_of.count(keys[i])) {
        todo_of[keys[i]] = todo.size();
        todo.push_back(jobs[i]);
      }
    }
  }
  if (todo.empty()) return out;
  std::vector<TritonBinary> binaries = hooks().compile(todo, /*background=*/false);
  EMBER_INTERNAL_ASSERT(binaries.size() == todo.size())
      << "the compile hook returned " << binaries.size() << " binaries for " << todo.size()
      << " kernels";
  std::vector<std::shared_ptr<const LoadedTritonKernel>> loaded(todo.size());
  std::lock_guard<std::mutex> lock(cache.mu);
  for (size_t j = 0; j < todo.size(); ++j) {
    if (binaries[j].error.empty()) {
      loaded[j] = load(std::move(binaries[j]), device);
      cache.entries[load_key(todo[j])] = loaded[j];
    }
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (out[i] != nullptr) continue;
    const size_t j = todo_of.at(keys[i]);
    out[i] = loaded[j];
    if (out[i] == nullptr) (*errors)[i] = binaries[j].error;
  }
  return out;
}

void launch_loaded(const LoadedTritonKernel& k, int64_t grid_x, int64_t grid_y,
                   std::vector<void*> pointers, int device, const std::vector<int64_t>& integers) {
  const TritonBinary& binary = k.binary;
  at::Tensor scratch;
  std::vector<void*> scratch_pointers;
  if (binary.global_scratch_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(binary.global_scratch_bytes) * grid_x * grid_y},
                        at::TensorOptions().dtype(at::kByte).device(at::kCUDA, device));
    scratch_pointers.push_back(scratch.data_ptr());
  } else {
    scratch_pointers.push_back(nullptr);
  }
  scratch_pointers.push_back(nullptr);  // profile scratch
  // cuLaunchKernel reads each argument through its address: the buffers, the integers, then
  // the scratch pointers, in the kernel's parameter order.
  std::vector<void*> params;
  params.reserve(pointers.size() + integers.size() + scratch_pointers.size());
  for (void*& p : pointers) params.push_back(&p);
  for (const int64_t& v : integers) params.push_back(const_cast<int64_t*>(&v));
  for (void*& p : scratch_pointers) params.push_back(&p);
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  c10::Stream stream = impl->getStream(c10::Device(c10::DeviceType::CUDA, device));
  ensure_context(device);
  EMBER_INTERNAL_ASSERT(grid_x <= 0x7fffffff && grid_y <= 65535) << "grid too large";
  check(driver().cuLaunchKernel(k.function, static_cast<unsigned>(grid_x),
                                static_cast<unsigned>(grid_y), 1,
                                static_cast<unsigned>(32 * binary.num_warps), 1, 1,
                                static_cast<unsigned>(binary.shared_bytes), stream.native_handle(),
                                params.data(), nullptr),
        "cuLaunchKernel");
}

TritonTuningStats triton_tuning_stats() {
  return {tuning_stats().timed.load(), tuning_stats().remembered.load()};
}

}  // namespace ember::runtime
