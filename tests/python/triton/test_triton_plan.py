"""ember._C.triton_plan: what the executor's Triton path makes of a graph traced for cuda:0,
with no GPU (nothing compiled or run). A ConvNeXt block in bf16: the convolution's bias is added
inside the layer-norm kernel (rewrite/conv_bias.h), whose 16384 rows of 96 run as row tiles, and
the gelu between the linears is one flat loop (loop/collapse.h)."""

from __future__ import annotations

import re

import torch
from blocks import ConvNeXtBlock

import ember
import ember._C as C


def test_convnext_block_plan_for_cuda():
    model = ConvNeXtBlock(96).eval().to(torch.bfloat16)
    x = torch.randn(16, 96, 32, 32, dtype=torch.bfloat16)
    with torch.no_grad():
        graph = ember.trace(model, (x,), device="cuda:0")
    plan = C.triton_plan(graph)
    assert [p["why"] for p in plan if p["why"]] == [], plan
    norm = [p for p in plan if "aten::native_layer_norm" in p["ops"]]
    assert len(norm) == 1 and "aten::add.Tensor" in norm[0]["ops"], norm  # the conv's bias
    assert norm[0]["rows_per_program"] == 16, norm[0]["triton"]
    gelu = [p for p in plan if "aten::gelu" in p["ops"]]
    assert len(gelu) == 1
    body = gelu[0]["triton"].split("@triton.jit\ndef ember_")[-1]
    assert "rem //" not in body, body  # one loop: no loop variable recovered by division


def test_bf16_relu_backward_mask_is_fused_on_cuda():
    # `x <= 0` of a bf16 tensor and a Python number: CUDA compares in bf16 as the CPU does, so the
    # mask is part of the kernel, not an ATen call per ReLU (49 in ResNet-50's bf16 backward).
    def f(g, y):
        return torch.ops.aten.threshold_backward(g, y, 0)

    cl = torch.channels_last
    args = [torch.randn(8, 32, 16, 16, dtype=torch.bfloat16).to(memory_format=cl) for _ in range(2)]
    plan = C.triton_plan(ember.trace(f, args, device="cuda:0"))
    assert [p["why"] for p in plan if p["why"]] == [], plan
    assert len(plan) == 1 and "aten::le.Scalar" in plan[0]["ops"], [p["ops"] for p in plan]
    body = plan[0]["triton"].split("@triton.jit\ndef ember_")[-1]
    assert "<=" in body, body


def test_batch_norm_statistics_index_channels_last_rows_linearly():
    # The staged sums read row n * 32 + r of a channels-last [32, 16, 32, 32] input (1024
    # partials of 32 rows): its (n, h, w) digits recombine to one stride (loop/simplify_rules.cpp,
    # recombine_div_mod), with no integer division per element.
    bn = torch.ops.aten._native_batch_norm_legit_functional
    x = torch.randn(32, 16, 32, 32, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    args = [x, torch.randn(16), torch.randn(16), torch.randn(16), torch.rand(16)]
    plan = C.triton_plan(ember.trace(lambda *a: bn(*a, True, 0.1, 1e-5), args, device="cuda:0"))
    stats = [p for p in plan if p["ops"].count("aten::sum.dim_IntList") == 2]
    assert stats, [p["ops"] for p in plan]
    body = stats[0]["triton"].split("@triton.jit\ndef ember_")[-1]
    assert "_ember_floordiv" not in body and "_ember_mod" not in body, body


def test_a_full_sum_is_one_program_not_cpu_chunks():
    # ScheduleOptions::chunk_single_rows: the CPU splits one long row into parallel chunks with
    # partial sums, which the Triton emitter refused (the loss of a ConvNeXt's logits, 128 x 1000,
    # ran as an ATen call).
    x = torch.randn(128, 1000, dtype=torch.bfloat16)
    plan = C.triton_plan(ember.trace(lambda x: x.float().sum(), [x], device="cuda:0"))
    assert [p["why"] for p in plan if p["why"]] == [], plan
    assert len(plan) == 1 and "acc_part" not in plan[0]["loop"], plan[0]["loop"]


def test_host_nodes_stay_aten_calls_and_the_rest_fuse():
    # A CUDA graph that also computes on the CPU (an index from torch.arange with no device): the
    # nodes reading or writing CPU tensors stay ATen calls (runtime/pipeline.h: host_nodes), the
    # CUDA nodes after them still fuse into one kernel.
    g = C.parse_traced_graph("""graph {
  input %0 : f32[4, 4] cuda:0  # user
  input %1 : f32[7] cuda:0  # user
  input %2 : i64[4] cpu  # user
  %3 : i64[4, 1] cpu = aten::unsqueeze(%2, 1)
  %4 : i64[1, 4] cpu = aten::unsqueeze(%2, 0)
  %5 : i64[4, 4] cpu = aten::sub.Tensor(%3, %4, alpha=1)
  %6 : f32[4, 4] cuda:0 = aten::index.Tensor(%1, [%5])
  %7 : f32[4, 4] cuda:0 = aten::mul.Tensor(%6, %0)
  %8 : f32[4, 4] cuda:0 = aten::add.Tensor(%7, %0, alpha=1)
  %9 : f32[4, 4] cuda:0 = aten::_softmax(%8, -1, False)
  return (%9)
}""")
    assert C.host_nodes(g) == [0, 1, 2, 3]
    plan = C.triton_plan(g)
    assert [p["ops"] for p in plan] == [["aten::mul.Tensor", "aten::add.Tensor", "aten::_softmax"]]
    assert plan[0]["why"] == ""


def test_a_cpu_scalar_a_host_node_reads_stays_on_the_cpu_with_its_readers():
    # A 0-dim CPU input moves to the device for kernels, unless a host node reads it too (ATen on
    # the CPU cannot read device memory): then every node reading it is a host node.
    def graph(host_reads_scalar: bool):
        cpu_mul = "aten::mul.Tensor(%2, %1)" if host_reads_scalar else "aten::neg(%2)"
        return C.parse_traced_graph(f"""graph {{
  input %0 : f32[4] cuda:0  # user
  input %1 : f32[] cpu  # user
  input %2 : f32[4] cpu  # user
  %3 : f32[4] cpu = {cpu_mul}
  %4 : f32[4] cuda:0 = aten::mul.Tensor(%0, %1)
  %5 : f32[4] cuda:0 = aten::exp(%4)
  return (%3, %5)
}}""")

    assert C.host_nodes(graph(True)) == [0, 1]
    assert C.host_nodes(graph(False)) == [0]
    assert [p["ops"] for p in C.triton_plan(graph(False))] == [["aten::mul.Tensor", "aten::exp"]]
    assert [p["ops"] for p in C.triton_plan(graph(True))] == [["aten::exp"]]


def test_a_graph_all_on_cuda_has_no_host_nodes():
    g = C.parse_traced_graph("""graph {
  input %0 : f32[4] cuda:0  # user
  input %1 : f32[] cpu  # user
  %2 : f32[4] cuda:0 = aten::mul.Tensor(%0, %1)
  return (%2)
}""")
    assert C.host_nodes(g) == []


def test_group_norm_over_channels_last_sums_along_memory():
    # Note [Reduction loops in the order of what the prologue reads]: CUDA's group_norm copies a
    # channels-last input to contiguous, and that copy is the prologue of the split norm's
    # per-channel sums. They read the channels-last buffer along memory: column tiles over the
    # contiguous channels, not rows of H x W at a stride of C (PoolFormer's GroupNorm(1)).
    x = torch.randn(64, 96, 56, 56, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
    w, b = torch.randn(96, dtype=torch.bfloat16), torch.randn(96, dtype=torch.bfloat16)
    with torch.no_grad():
        graph = ember.trace(lambda x: torch.nn.functional.group_norm(x + 1, 1, w, b), (x,),
                            device="cuda:0")
    plan = C.triton_plan(graph)
    assert [p["why"] for p in plan if p["why"]] == [], plan
    sums = [p for p in plan if "aten::clone" in p["ops"] and "aten::sum.dim_IntList" in p["ops"]]
    assert len(sums) == 2, [p["ops"] for p in plan]  # the sums, then the squared deviations'
    for p in sums:
        loop = p["loop"]
        assert "strides [301056, 1, 5376, 96]" in loop, loop  # the channels-last buffer
        # The channel loop is innermost and vectorized, H x W outside it; 64 samples of 96
        # channels are tiles of 16 channels (384 programs: ScheduleOptions::min_parallel_rows).
        assert re.search(r"for \(x3, 0, 3136\) \{\s+for \(c, 0, 16\) vectorized", loop), loop


def test_a_pool_of_few_channels_has_programs_for_the_gpu():
    # mobilenetv3's squeeze-and-excitation pools at batch 1, channels-last: one program per 16
    # channels (ScheduleOptions::min_parallel_rows, 128 for Triton graphs), where the CPU's rule
    # of 4 parallel iterations gave 3 or 4 programs of up to 256 channels over every row (9 to
    # 26 us each on an H100 against 1.5 for Inductor's).
    for c, hw, programs in ((72, 28, 5), (672, 14, 42), (960, 7, 60)):
        x = torch.randn(1, c, hw, hw, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        with torch.no_grad():
            graph = ember.trace(lambda x: x.mean((2, 3), keepdim=True), (x,), device="cuda:0")
        plan = C.triton_plan(graph)
        assert [p["why"] for p in plan if p["why"]] == [], plan
        assert len(plan) == 1, [p["ops"] for p in plan]
        assert f"for (p, 0, {programs}) parallel" in plan[0]["loop"], plan[0]["loop"]
