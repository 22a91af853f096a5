"""One rank of a data-parallel training run on gloo (DistributedDataParallel, or FSDP2's
fully_shard), under ember and eagerly, for test_ddp.py:
`python ddp_worker.py RANK WORLD PORT MODEL ENTRY STEPS [ddp|fsdp]`. Both copies of the suite
model (ember.bench's small size) train with SGD on the same per-rank batches; rank 0 prints one
JSON line with the largest differences of the loss, the gradients and the parameters, and ember's
counters."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import sys
import types

import torch
import torch.distributed as dist


def shard(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2: each block of the model's ModuleLists its own group, then the root."""
    from torch.distributed.fsdp import fully_shard

    for m in model.modules():
        if isinstance(m, torch.nn.ModuleList):
            for block in m:
                fully_shard(block)
    return fully_shard(model)


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(32, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.fc(x)) + x


class _BlocksInWith(torch.nn.Module):
    """Blocks of the program's own class called inside a with block: a DDP bucket boundary there
    is a graph break inside the block (the resume function enters it again)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_Block() for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with contextlib.nullcontext():
            for block in self.blocks:
                x = block(x)
        return x


class _BlocksInTry(_BlocksInWith):
    """The blocks called inside a try block, where no graph break can be taken (a DDP bucket
    boundary there falls back to the whole frame)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            for block in self.blocks:
                x = block(x)
        except ValueError:
            x = x * 0
        return x


def build(model_name: str):
    from ember.bench import models as M

    if model_name in ("blocks_in_with", "blocks_in_try"):
        cls = _BlocksInWith if model_name == "blocks_in_with" else _BlocksInTry
        return types.SimpleNamespace(model=cls(), args=(torch.randn(8, 32),), kwargs={},
                                     loss_fn=lambda out: out)
    return M.REGISTRY[model_name].build("small", "training", "cpu")


def full(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's whole value (FSDP2 shards parameters and gradients); a tensor as it is."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    model_name, entry, steps = sys.argv[4], sys.argv[5], int(sys.argv[6])
    wrap = sys.argv[7] if len(sys.argv) > 7 else "ddp"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    import ember
    from ember.bench import models as M

    torch.manual_seed(0)
    wl = build(model_name)
    eager_model = copy.deepcopy(wl.model).train()
    model = wl.model.train()
    if wrap.startswith("ddp"):
        # "ddp:<MB>": buckets of that many MB (small ones split the model's graph)
        cap = {"bucket_cap_mb": float(wrap[4:])} if wrap.startswith("ddp:") else {}
        ref = torch.nn.parallel.DistributedDataParallel(eager_model, **cap)
        ddp = torch.nn.parallel.DistributedDataParallel(model, **cap)
    else:
        ref, ddp = shard(eager_model), shard(model)
    compiled = torch.compile(ddp, backend="ember") if entry == "torch" else ember.compile(ddp)
    opt_ref = torch.optim.SGD(eager_model.parameters(), lr=0.01)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    worst = {"loss": 0.0, "grad": 0.0, "param": 0.0}

    def rel(a: torch.Tensor, b: torch.Tensor) -> float:
        return ((a - b).norm() / b.norm().clamp_min(1e-12)).item()

    for step in range(steps):
        torch.manual_seed(1000 * step + rank)  # each rank its own batch, as in data parallelism
        args = [a.clone() if isinstance(a, torch.Tensor) else a for a in wl.args]
        if args and args[0].is_floating_point():
            args[0] = torch.randn_like(args[0])
        loss_ref = M.reduce_to_scalar_loss(wl.loss_fn(ref(*args, **wl.kwargs)))
        loss = M.reduce_to_scalar_loss(wl.loss_fn(compiled(*args, **wl.kwargs)))
        loss_ref.backward()
        loss.backward()
        worst["loss"] = max(worst["loss"], abs(loss.item() - loss_ref.item()) /
                            max(abs(loss_ref.item()), 1e-12))
        for p, q in zip(model.parameters(), eager_model.parameters()):
            if q.grad is not None:
                worst["grad"] = max(worst["grad"], rel(full(p.grad), full(q.grad)))
        opt.step()
        opt_ref.step()
        opt.zero_grad()
        opt_ref.zero_grad()
    for p, q in zip(model.parameters(), eager_model.parameters()):
        worst["param"] = max(worst["param"], rel(full(p.detach()), full(q.detach())))
    # Every rank holds the same parameters (data parallelism's invariant).
    flat = torch.cat([full(p.detach()).flatten() for p in model.parameters()])
    others = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(others, flat)
    worst["ranks"] = max((o - flat).abs().max().item() for o in others)
    if rank == 0:
        counters = ember.metrics.snapshot()
        print(json.dumps({**worst, "graphs": counters["graphs"],
                          "training_graphs": counters["training_graphs"],
                          "graph_breaks": counters["graph_breaks"],
                          "kernels": counters["kernels"],
                          "eager_frames": counters["eager_frames"],
                          "reasons": ember.metrics.fallback_reasons[:8]}), flush=True)
    dist.barrier()
    del compiled, ddp, ref
    dist.destroy_process_group()
    # Leaves without the interpreter's teardown: once in about 30 runs under load, a rank
    # aborted there ("terminate called without an active exception", a joinable std::thread
    # destroyed: gloo's or c10d's, ember has none) after printing its result.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
