"""Note [Recompute or realize] (sched/fusion_internal.h): the gradient of a residual stream is a
chain of sums, one link per residual add, each read by its layer's kernels (the layer-norm
backward's sums and dx) and by the next link. Each link is an offender of the cost rule; the
rule realized only offenders no other offender reads, one link per round, and its 16 rounds ran
out at about 8 layers: every later kernel computed the whole remaining chain again (a ViT-Base
backward in bf16 moved 95 GB where 72 GB do). Planned for cuda:0 with no GPU
(Note [Tracing for a device this torch lacks])."""

import re

import torch

import ember._C as C
import ember.tracing as T

F = torch.nn.functional
D = 64


def blocks(x, *ws):
    h = x
    for i in range(0, len(ws), 2):
        h = h + F.linear(F.layer_norm(h, (D,)), ws[i])
        h = h + F.linear(F.gelu(F.linear(F.layer_norm(h, (D,)), ws[i + 1])), ws[i + 1].t())
    return F.layer_norm(h, (D,)).sum()


def backward_kernel_inputs(layers: int) -> list[int]:
    torch.manual_seed(0)
    args = [torch.randn(8, 16, D)] + [torch.randn(D, D) for _ in range(2 * layers)]
    torch.set_autocast_enabled("cuda", True)  # torch.autocast("cuda") is off without CUDA
    torch.set_autocast_dtype("cuda", torch.bfloat16)
    try:
        joint, _, sig = T.trace_joint(blocks, args, [True] * len(args), device="cuda:0")
    finally:
        torch.set_autocast_enabled("cuda", False)
    _, backward, _ = C.split_training_graph(joint, **sig)
    return [len(re.findall(r"^\s*input ", p["loop"], re.M)) for p in C.triton_plan(backward)]


def test_the_chain_is_realized_link_by_link():
    eight, twelve = sum(backward_kernel_inputs(8)), sum(backward_kernel_inputs(12))
    # Linear in depth (about 30 inputs a layer); before, 337 and 992.
    assert twelve - eight < 40 * 4, (eight, twelve)
    assert twelve < 450, twelve
