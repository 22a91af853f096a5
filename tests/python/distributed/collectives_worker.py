"""One rank of test_collectives.py: functional collectives (torch.distributed.
_functional_collectives) in programs compiled by ember.compile, on gloo.
`python collectives_worker.py RANK WORLD PORT`. Each program runs compiled and eagerly on the
same per-rank inputs; rank 0 prints one JSON line per program: the largest difference, ember's
counters, and the collective and wait nodes of its captured graph in graph order. A fourth
argument `cuda` runs on NCCL with each rank's tensors on its GPU (the device machine, world size
1: scripts/gpu_run.sh)."""

from __future__ import annotations

import json
import os
import re
import sys

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol


def all_reduce(x):
    y = torch.relu(x) * 2
    return funcol.all_reduce(y, "sum", dist.group.WORLD) + 1


# The newer names (torch 2.13); torch 2.11 has only the older ones.
_all_gather = getattr(funcol, "all_gather_single", None) or funcol.all_gather_tensor
_reduce_scatter = getattr(funcol, "reduce_scatter_single", None) or funcol.reduce_scatter_tensor


def all_gather(x, w):
    g = _all_gather(x.sin(), 0, dist.group.WORLD)
    return g @ w


def reduce_scatter(x):
    return _reduce_scatter(x * x, "sum", 0, dist.group.WORLD).cos()


def independent_work(x, w):
    # The all-reduce's result is read last: the matrix product and the softmax need none of it.
    s = funcol.all_reduce(x.sum(0, keepdim=True), "sum", dist.group.WORLD)
    h = torch.softmax(x @ w, dim=-1)
    return h * s


def late_collectives(x, w):
    # Two all-reduces written after work that does not feed them, the second's input ready
    # first: hoist_collectives issues the first after its input; the second stays behind the
    # first's use (one in flight), and the ranks keep one order.
    a = x.sum(0, keepdim=True)
    y = torch.softmax(x @ w, dim=-1)
    b = y.amax(0, keepdim=True)
    z = torch.relu(y @ w)
    sa = funcol.all_reduce(b, "max", dist.group.WORLD)
    sb = funcol.all_reduce(a, "sum", dist.group.WORLD)
    return z * sa + sb


class TensorParallelMLP(torch.nn.Module):
    """Megatron's MLP: the first linear's columns and the second's rows split across ranks, one
    all-reduce of the partial sums."""

    def __init__(self, world: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32 // world)
        self.down = torch.nn.Linear(32 // world, 16, bias=False)

    def forward(self, x):
        partial = self.down(torch.nn.functional.gelu(self.up(x)))
        return funcol.all_reduce(partial, "sum", dist.group.WORLD)


class ShardedLinear(torch.nn.Module):
    """FSDP written with functional collectives (SimpleFSDP's way): the weight is this rank's
    rows; the forward all-gathers the whole weight, whose backward reduce-scatters its gradient
    to the shards."""

    def __init__(self, features: int, world: int, rank: int) -> None:
        super().__init__()
        full = torch.randn(features, features) / features ** 0.5
        self.shard = torch.nn.Parameter(full.chunk(world)[rank].clone())

    def forward(self, x):
        w = funcol.all_gather_single(self.shard, 0, dist.group.WORLD)
        return x @ w.t()


class ShardedMLP(torch.nn.Module):
    def __init__(self, world: int, rank: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(ShardedLinear(16, world, rank) for _ in range(3))

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x.square().mean()


def train_sharded(rank: int, world: int, device: str) -> dict:
    """3 SGD steps of ShardedMLP compiled and eagerly: the largest difference of the loss and the
    shards' gradients, the counters, and the forward graph's returned values that are gathered
    weights (none: Note [Parameters gathered again in the backward])."""
    import copy

    import ember
    import ember.capture

    torch.manual_seed(0)
    net = ShardedMLP(world, rank).to(device)
    ref = copy.deepcopy(net)
    ember.metrics.reset()
    before = len(ember.capture.records())
    compiled = ember.compile(net)
    torch.manual_seed(1 + rank)
    worst = 0.0
    for _ in range(3):
        x = torch.randn(4, 16, device=device)
        got, want = compiled(x), ref(x)
        got.backward()
        want.backward()
        worst = max(worst, abs(got.item() - want.item()))
        for p, q in zip(net.parameters(), ref.parameters()):
            worst = max(worst, (p.grad - q.grad).abs().max().item())
            with torch.no_grad():
                p -= 0.1 * p.grad
                q -= 0.1 * q.grad
            p.grad = q.grad = None
    s = ember.metrics.snapshot()
    graph = ember.capture.records()[before]["graph"]
    waits = set(re.findall(r"(%\d+) : [^=]*= _c10d_functional::wait_tensor", graph))
    returned = re.search(r"return \(([^)]*)\)", graph).group(1).replace(" ", "").split(",")
    return {"program": "sharded_training", "diff": worst, "graphs": s["graphs"],
            "graph_breaks": s["graph_breaks"], "eager_frames": s["eager_frames"],
            "training_graphs": s.get("training_graphs", 0),
            "gathered_saved": [v for v in returned if v in waits],
            "gathers": graph.count("all_gather_into_tensor"),
            "reasons": ember.metrics.fallback_reasons[:4]}


def main() -> None:
    rank, world, port = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    device = f"cuda:{rank}" if len(sys.argv) > 4 and sys.argv[4] == "cuda" else "cpu"
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    if device != "cpu":
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if device != "cpu" else "gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    import ember
    import ember.capture

    torch.manual_seed(rank)  # each rank its own inputs and shards
    mlp = TensorParallelMLP(world).to(device)
    programs = {
        "all_reduce": (all_reduce, (torch.randn(4, 8),)),
        "all_gather": (all_gather, (torch.randn(3, 8), torch.randn(8, 5))),
        "reduce_scatter": (reduce_scatter, (torch.randn(2 * world, 6),)),
        "independent_work": (independent_work, (torch.randn(6, 8), torch.randn(8, 8))),
        "tensor_parallel_mlp": (mlp, (torch.randn(5, 16),)),
        "late_collectives": (late_collectives, (torch.randn(6, 8), torch.randn(8, 8))),
    }
    for name, (fn, args) in programs.items():
        args = tuple(a.to(device) for a in args)
        ember.metrics.reset()
        before = len(ember.capture.records())
        compiled = ember.compile(fn)
        worst = 0.0
        for call in range(3):
            xs = [a + call for a in args]
            with torch.no_grad():
                want = fn(*xs)
                got = compiled(*xs)
            worst = max(worst, (got - want).abs().max().item())
        s = ember.metrics.snapshot()
        graphs = [r["graph"] for r in ember.capture.records()[before:]]
        ops = [op for g in graphs
               for op in re.findall(r"= (_c10d_functional::\w+|aten::\w+|ember::\w+)", g)]
        if rank == 0:
            print(json.dumps({"program": name, "diff": worst, "graphs": s["graphs"],
                              "graph_breaks": s["graph_breaks"], "eager_frames": s["eager_frames"],
                              "ops": ops, "reasons": ember.metrics.fallback_reasons[:4]}),
                  flush=True)
    row = train_sharded(rank, world, device)
    if rank == 0:
        print(json.dumps(row), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
