"""Optimizer steps through torch.compile(backend="ember") against eager's, shared by
tests/python/training/test_optimizer.py and tests/python/triton/test_triton_combo.py."""

import torch

import ember

SHAPES = [(16, 8), (16,), (12, 16), (12,), (3, 4, 5), (7,), (2, 3), (1,), (5, 1, 2), (33,)]
OPTIMIZERS = {
    "Adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False),
    "AdamW": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=False),
    "SGD": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2, foreach=False),
    # The multi-tensor path (the default on CUDA): its _foreach_* ops are recorded as the
    # per-tensor ops (rewrite/foreach_ops.h), which fuse and merge as the for-loop's.
    "Adam-foreach": lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=True),
    "AdamW-foreach": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, foreach=True),
    "SGD-foreach": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2,
                                              foreach=True),
}


def optimizer_steps_match_eager(name, shapes, device="cpu", steps=3):
    """Runs `steps` compiled steps of optimizer `name` over parameters of `shapes` and the same
    steps eagerly; parameters and optimizer state must match. Returns ember.metrics' snapshot."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s, device=device)) for s in shapes]
    twins = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, eager_opt = OPTIMIZERS[name](params), OPTIMIZERS[name](twins)
    torch._dynamo.reset()
    ember.metrics.reset()
    step = torch.compile(opt.step, backend="ember")
    for _ in range(steps):
        for p, q in zip(params, twins):
            p.grad = torch.randn_like(p)
            q.grad = p.grad.clone()
        step()
        eager_opt.step()
        for p, q in zip(params, twins):
            torch.testing.assert_close(p, q, atol=1e-6, rtol=1e-5)
    for p, q in zip(params, twins):
        assert opt.state[p].keys() == eager_opt.state[q].keys()
        for k, v in eager_opt.state[q].items():
            # On CUDA, Dynamo's optimizer handling (torch/_dynamo/variables/optimizer.py) sets
            # capturable=True before the first step, so Adam's `step` count lives on the GPU under
            # any backend, where eager keeps it on the CPU.
            torch.testing.assert_close(opt.state[p][k], v, atol=1e-6, rtol=1e-5,
                                       check_device=False)
    snap = ember.metrics.snapshot()
    assert snap["fallbacks"] == 0 and snap["extern_steps"] == 0, (snap,
                                                                ember.metrics.fallback_reasons)
    return snap
