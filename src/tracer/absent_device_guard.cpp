#include "tracer/absent_device_guard.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/transformers/attention.h>
#include <c10/core/Allocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <mutex>

#include "support/error.h"

namespace ember::tracer {

namespace {

// Note [Tracing for a device this torch lacks]: one device (index 0), the default stream only.
class AbsentDeviceGuard final : public c10::impl::DeviceGuardImplInterface {
 public:
  explicit AbsentDeviceGuard(c10::DeviceType type) : type_(type) {}

  c10::DeviceType type() const override { return type_; }
  c10::Device exchangeDevice(c10::Device) const override { return {type_, 0}; }
  c10::Device getDevice() const override { return {type_, 0}; }
  void setDevice(c10::Device) const override {}
  void uncheckedSetDevice(c10::Device) const noexcept override {}
  c10::Stream getStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, d);
  }
  c10::Stream getDefaultStream(c10::Device d) const override { return getStream(d); }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getStream(d);
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override { return getStream(d); }
  c10::Stream exchangeStream(c10::Stream s) const override { return s; }
  void destroyEvent(void* /*event*/,
                    const c10::DeviceIndex /*device_index*/) const noexcept override {}
  void record(void** /*event*/, const c10::Stream& /*stream*/,
              const c10::DeviceIndex /*device_index*/,
              const c10::EventFlag /*flag*/) const override {}
  void block(void* /*event*/, const c10::Stream& /*stream*/) const override {}
  bool queryEvent(void* /*event*/) const override { return true; }
  c10::DeviceIndex deviceCount() const noexcept override { return 1; }
  bool queryStream(const c10::Stream& /*stream*/) const override { return true; }
  void synchronizeStream(const c10::Stream& /*stream*/) const override {}
  void synchronizeEvent(void* /*event*/) const override {}
  void synchronizeDevice(const c10::DeviceIndex /*device_index*/) const override {}

 private:
  c10::DeviceType type_;
};

// Empty tensors on the stand-in device: ATen's composites make some (batch norm's `reserve`,
// `at::empty({0}, input.options())`) while they run on tracer tensors. Anything larger would need
// memory there, which the stand-in does not have.
class EmptyOnlyAllocator final : public c10::Allocator {
 public:
  explicit EmptyOnlyAllocator(c10::DeviceType type) : type_(type) {}
  c10::DataPtr allocate(size_t n) override {
    EMBER_CHECK(n == 0) << "a " << c10::DeviceTypeName(type_) << " tensor of " << n
                        << " bytes while tracing for a device this torch "
                        << "lacks (Note [Tracing for a device this torch lacks]): only empty "
                           "ones can be made";
    return c10::DataPtr(nullptr, c10::Device(type_, 0));
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* /*dest*/, const void* /*src*/, std::size_t /*count*/) const override {}

 private:
  c10::DeviceType type_;
};

EmptyOnlyAllocator cuda_empty_allocator(c10::DeviceType::CUDA);

at::Tensor empty_on_stand_in(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                             std::optional<at::Layout> /*layout*/,
                             std::optional<at::Device> /*device*/,
                             std::optional<bool> /*pin_memory*/,
                             std::optional<at::MemoryFormat> memory_format) {
  return at::detail::empty_generic(size, &cuda_empty_allocator,
                                   c10::DispatchKeySet(c10::DispatchKey::CUDA),
                                   dtype.value_or(at::kFloat), memory_format);
}

// Attention's backend, which eager asks CUDA's kernel for through a DispatchStub that a torch
// without CUDA lacks (so every SDPA would take the math path). What eager chooses on an H200 for
// the suite's models (torch 2.11): cuDNN's kernel for bf16 and f16 without a mask and with heads of
// at most 128 (a multiple of 8), the memory-efficient one otherwise. An approximation, for plans.
int64_t emulated_sdp_choice(const at::Tensor& q, const at::Tensor& /*k*/, const at::Tensor& /*v*/,
                            const std::optional<at::Tensor>& mask, double dropout,
                            bool /*is_causal*/, std::optional<double> /*scale*/,
                            bool /*enable_gqa*/) {
  const bool half = q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf;
  const int64_t head = q.dim() == 4 ? q.sym_size(-1).guard_int(__FILE__, __LINE__) : 0;
  const bool no_mask = !mask.has_value() || !mask->defined();
  if (head == 0 || head % 8 != 0 || dropout != 0.0) return 0;  // sdp::SDPBackend::math
  return half && no_mask && head <= 128 ? 3 : 2;               // cudnn_attention : efficient
}

void register_cuda_empty() {
  static torch::Library* lib =
      new torch::Library(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__, __LINE__);
  lib->impl("empty.memory_format", TORCH_FN(empty_on_stand_in));
  at::native::_fused_sdp_choice_stub.set_cuda_dispatch_ptr(&emulated_sdp_choice);
}

}  // namespace

namespace {
std::array<std::atomic<bool>, static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)>
    stand_in{};
}  // namespace

bool ensure_device_guard(c10::DeviceType type) {
  const size_t t = static_cast<size_t>(type);
  if (type == c10::DeviceType::CPU) return false;
  if (c10::impl::hasDeviceGuardImpl(type)) return stand_in.at(t).load();
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (c10::impl::hasDeviceGuardImpl(type)) return stand_in.at(t).load();
  // Never freed: the registry holds plain pointers for the life of the process.
  static std::array<AbsentDeviceGuard*,
                    static_cast<size_t>(c10::DeviceType::COMPILE_TIME_MAX_DEVICE_TYPES)>
      guards{};
  auto*& g = guards.at(static_cast<size_t>(type));
  g = new AbsentDeviceGuard(type);
  stand_in.at(t) = true;
  c10::impl::DeviceGuardImplRegistrar registrar(type, g);
  if (type == c10::DeviceType::CUDA) register_cuda_empty();
  return true;
}

}  // namespace ember::tracer
