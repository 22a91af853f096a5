#include "graph/types.h"

#include <gtest/gtest.h>

namespace ember::graph {
namespace {

TEST(DTypeName, NamesKnownDTypesShortly) {
  EXPECT_EQ(dtype_name(DType::Float32), "f32");
  EXPECT_EQ(dtype_name(DType::BFloat16), "bf16");
  EXPECT_EQ(dtype_name(DType::Int64), "i64");
  EXPECT_EQ(dtype_name(DType::Bool), "b8");
  EXPECT_EQ(dtype_name(DType::ComplexDouble), "c128");
  EXPECT_EQ(dtype_name(DType::Float8_e4m3fn), "f8e4m3fn");
}

TEST(DTypeName, PrintsUnnamedCodesByNumber) {
  EXPECT_EQ(dtype_name(static_cast<DType>(99)), "dtype<99>");
}

TEST(ElementSize, MatchesTheStorageWidth) {
  EXPECT_EQ(element_size(DType::Bool), 1);
  EXPECT_EQ(element_size(DType::Float8_e5m2), 1);
  EXPECT_EQ(element_size(DType::BFloat16), 2);
  EXPECT_EQ(element_size(DType::Float32), 4);
  EXPECT_EQ(element_size(DType::Int64), 8);
  EXPECT_EQ(element_size(DType::ComplexDouble), 16);
  EXPECT_EQ(element_size(static_cast<DType>(99)), 0);
}

TEST(ContiguousStrides, AreRowMajor) {
  EXPECT_EQ(contiguous_strides({2, 3, 4}), (Dims{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({}), Dims{});
  EXPECT_EQ(contiguous_strides({5}), Dims{1});
}

TEST(ContiguousStrides, TreatSizeZeroAndOneDimsAsTorchDoes) {
  // torch.empty(2, 0, 3).stride() == (3, 3, 1); torch.empty(1, 3).stride() == (3, 1).
  EXPECT_EQ(contiguous_strides({2, 0, 3}), (Dims{3, 3, 1}));
  EXPECT_EQ(contiguous_strides({1, 3}), (Dims{3, 1}));
  EXPECT_EQ(contiguous_strides({4, 1, 1}), (Dims{1, 1, 1}));
}

TEST(Numel, CountsElements) {
  EXPECT_EQ(numel({2, 3, 4}), 24);
  EXPECT_EQ(numel({}), 1);
  EXPECT_EQ(numel({2, 0}), 0);
}

TensorType make_type(DType dtype, Dims sizes) {
  TensorType t;
  t.dtype = dtype;
  t.strides = contiguous_strides(sizes);
  t.sizes = std::move(sizes);
  return t;
}

TEST(TypeStr, PrintsContiguousTypesWithoutStrides) {
  EXPECT_EQ(type_str(make_type(DType::Float32, {2, 3})), "f32[2, 3] cpu");
  EXPECT_EQ(type_str(make_type(DType::Int64, {})), "i64[] cpu");
}

TEST(TypeStr, PrintsStridesOffsetDeviceAndGrad) {
  TensorType t = make_type(DType::BFloat16, {3, 2});
  t.strides = {1, 3};
  t.storage_offset = 4;
  t.device = Device{DeviceKind::CUDA, 0};
  t.requires_grad = true;
  EXPECT_EQ(type_str(t), "bf16[3, 2]{1, 3}+4 cuda:0 grad");
}

TEST(DeviceName, PrintsKindAndIndex) {
  EXPECT_EQ(device_name(Device{}), "cpu");
  EXPECT_EQ(device_name(Device{DeviceKind::CUDA, 1}), "cuda:1");
  EXPECT_EQ(device_name(Device{DeviceKind::Meta, -1}), "meta");
}

}  // namespace
}  // namespace ember::graph
