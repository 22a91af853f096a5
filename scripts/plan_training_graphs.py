"""Shows, with no GPU, the training graphs ember would compile for a suite model on CUDA: each
graph traced for cuda:0 (Note [Tracing for a device this torch lacks]), split as the compiled
function splits it, and scheduled by the Triton path (`ember._C.triton_plan`). Per kernel: its
ops, the bytes its buffers hold (read and written once: a lower bound on its traffic) and the
time that takes at the H200's bandwidth; per graph the extern ops (cuBLAS, cuDNN, ATen).
Nothing is compiled or run for real: each graph is replaced by a stub returning zeros, so a
full-size model plans in seconds on the CPU machine.

    python scripts/plan_training_graphs.py timm_vit_base_patch16_224 --dtype bf16 [--top 30]
    python scripts/plan_training_graphs.py timm_vit_base_patch16_224 --dtype bf16 --code b12

`--mode inference` plans the inference graphs instead (traced for cuda:0 under no_grad, as the
Executor gets them before its own rewrites: constant folding, attention fusion, causal masks).

timm models need timm on the path and --vision-stub (scripts/vision_stub.py): timm installed with
`pip install --no-deps --target /tmp/timmlib timm`, run with PYTHONPATH=/tmp/timmlib.
"""
import argparse
import collections
import importlib
import re

import torch

import ember._C as C
from ember.bench import harness as H
from ember.bench import models as M
from ember.tracing import trace_joint, trace_with_structure

B = importlib.import_module("ember.backend")  # the module (ember.backend is its function)
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i8": 1, "u8": 1, "b8": 1}
BANDWIDTH = 4.0e12  # bytes/s, an H200's HBM3e (4.8 TB/s peak; about 4 reached)
DECL = re.compile(r"^\s*(input|output) \w+ : (\w+)\[([^\]]*)\]")


def traffic(loop: str) -> int:
    """Bytes of a kernel's buffers (each read or written once)."""
    total = 0
    for line in loop.splitlines():
        m = DECL.match(line)
        if m:
            n = 1
            for s in filter(None, (t.strip() for t in m.group(3).split(","))):
                n *= int(s)
            total += n * BYTES.get(m.group(2), 4)
    return total


def short(ops: list[str]) -> str:
    names = [o.removeprefix("aten::").split(".")[0] for o in ops]
    counts = collections.Counter(names)
    return " ".join(f"{n}x{c}" if c > 1 else n for n, c in counts.most_common())


DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
          "i64": torch.int64, "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8, "b8": torch.bool}
VALUE = re.compile(r"(%\d+) : (\w+)\[([^\]]*)\]")


def returned(text: str) -> list[str]:
    """The names of a printed graph's outputs (graph/printer.h), in order."""
    return text.split("return (")[-1].split(")")[0].replace(" ", "").split(",")


def output_types(text: str, n: int) -> list[torch.Tensor]:
    """Meta tensors of the first `n` outputs of a printed graph (graph/printer.h)."""
    types = {}
    for m in VALUE.finditer(text):
        types[m.group(1)] = (DTYPES[m.group(2)], [int(s) for s in m.group(3).split(",") if s.strip()])
    names = returned(text)
    return [torch.empty(types[v][1], dtype=types[v][0], device="meta") for v in names[:n]]


def saved_by_op(text: str, n: int) -> list[tuple[str, float, int]]:
    """MiB of the outputs after the first `n` of a printed forward graph (what it saves for the
    backward), by the op that makes each (inputs as "input"), largest first."""
    sizes, ops = {}, {}
    for m in VALUE.finditer(text):
        numel = 1
        for s in m.group(3).split(","):
            numel *= int(s) if s.strip() else 1
        sizes[m.group(1)] = numel * torch.empty(0, dtype=DTYPES[m.group(2)]).element_size()
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("input "):
            ops[line.split()[1]] = "input"
        elif line.startswith(("%", "(%")) and " = " in line:
            lhs, rhs = line.split(" = ", 1)
            for v in re.findall(r"%\d+", lhs):
                ops[v] = rhs.split("(")[0]
    names = returned(text)
    total = collections.defaultdict(lambda: [0, 0])
    for v in dict.fromkeys(names[n:]):
        total[ops.get(v, "?")][0] += sizes.get(v, 0)
        total[ops.get(v, "?")][1] += 1
    rows = [(op, b / 2**20, c) for op, (b, c) in total.items()]
    return sorted(rows, key=lambda r: -r[1])


class Stub(torch.autograd.Function):
    """Stands for a compiled graph: zeros of the outputs' shapes, zero gradients."""

    @staticmethod
    def forward(ctx, metas, *inputs):
        ctx.inputs = [(x.shape, x.dtype) if isinstance(x, torch.Tensor) else None for x in inputs]
        return tuple(torch.zeros(m.shape, dtype=m.dtype) for m in metas)

    @staticmethod
    def backward(ctx, *grads):
        return (None, *[torch.zeros(s, dtype=d) if s is not None and d.is_floating_point else None
                        for s, d in [(i if i else (None, None)) for i in ctx.inputs]])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("model")
    p.add_argument("--dtype", default="bf16", choices=("fp32", "bf16", "fp16"))
    p.add_argument("--mode", default="training", choices=("training", "inference"))
    p.add_argument("--size", default="full")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--top", type=int, default=25, help="kernels listed per graph, by bytes")
    p.add_argument("--code", default=None, help="print one kernel's Triton code and loop IR: "
                   "f<N> / b<N> for the forward / backward kernel N of graph 0, or g<G>b<N>")
    p.add_argument("--vision-stub", action="store_true",
                   help="stand-ins for torchvision and PIL, so timm's models build (vision_stub.py)")
    a = p.parse_args()
    if a.vision_stub:
        import vision_stub  # noqa: PLC0415 (scripts/, beside this file)

        vision_stub.install()
    wl = M.REGISTRY[a.model].build(a.size, a.mode, "cpu", a.batch_size)
    plans = []

    def inference_planner(gm, example_inputs, **_kwargs):
        kinds, names = B._input_kinds(gm, example_inputs)
        graph, unflatten = trace_with_structure(gm, example_inputs, kinds, names, device="cuda:0")
        plans.append((graph, None, 0, 0))
        text = str(graph)
        metas = output_types(text, len(returned(text)))
        return lambda *args: unflatten([torch.zeros(m.shape, dtype=m.dtype) for m in metas])

    def planner(gm, example_inputs, **_kwargs):
        kinds, names = B._input_kinds(gm, example_inputs)
        requires_grad = [x.requires_grad for x in example_inputs]
        joint, _, sig = trace_joint(gm, example_inputs, requires_grad, kinds, names, device="cuda:0")
        forward, backward, saved = C.split_training_graph(joint, **sig)
        plans.append((forward, backward, saved, sig["num_forward_outputs"]))
        metas = output_types(str(forward), sig["num_forward_outputs"])
        return lambda *args: list(Stub.apply(metas, *args))

    training = a.mode == "training"
    model = H.TrainWrapper(wl.model, wl.loss_fn) if training else wl.model.eval()
    compiled = torch.compile(model, backend=planner if training else inference_planner)
    if a.dtype != "fp32":  # torch.autocast("cuda") turns itself off on a torch without CUDA
        torch.set_autocast_enabled("cuda", True)
        torch.set_autocast_dtype("cuda", torch.bfloat16 if a.dtype == "bf16" else torch.float16)
    if training:
        loss, _ = compiled(*wl.args, **wl.kwargs)
    else:
        with torch.no_grad():
            compiled(*wl.args, **wl.kwargs)
    torch.set_autocast_enabled("cuda", False)
    if training:
        loss.backward()

    total_ms = 0.0
    for gi, (forward, backward, saved, num_outputs) in enumerate(plans):
        if backward is None:
            print(f"== graph {gi} (inference)")
        else:
            print(f"== graph {gi}: saved for the backward {saved / 2**20:.1f} MiB")
            by_op = saved_by_op(str(forward), num_outputs)
            print("  saved MiB by op: " + ", ".join(f"{op} {mb:.1f} (x{n})" for op, mb, n in by_op[:8]))
        for side, graph in (("f", forward), ("b", backward)):
            if graph is None:
                continue
            plan = C.triton_plan(graph)
            fused = collections.Counter(o for k in plan for o in k["ops"])
            externs = collections.Counter(graph.ops) - fused
            rows = sorted(((traffic(k["loop"]), i, k) for i, k in enumerate(plan)), reverse=True)
            ms = sum(t for t, _, _ in rows) / BANDWIDTH * 1e3
            total_ms += ms
            name = "forward" if side == "f" else "backward"
            print(f"  {name}: {len(plan)} kernels, {sum(t for t, _, _ in rows) / 2**20:.0f} MiB "
                  f"moved at least ({ms:.2f} ms at {BANDWIDTH / 1e12:.0f} TB/s), "
                  f"{sum(1 for k in plan if k['why'])} refused")
            for t, i, k in rows[:a.top]:
                why = f"  REFUSED: {k['why'][:120]}" if k["why"] else ""
                print(f"    {side}{i:<4d} {t / 2**20:8.1f} MiB {t / BANDWIDTH * 1e6:7.1f} us  "
                      f"rows/prog {k['rows_per_program']:<3d} {short(k['ops'])[:110]}{why}")
            kept = {o: n for o, n in externs.items() if not o.startswith(("aten::view", "aten::t",
                    "aten::permute", "aten::expand", "aten::_unsafe_view", "aten::transpose",
                    "aten::unsqueeze", "aten::squeeze", "aten::slice", "aten::select",
                    "aten::alias", "aten::detach", "aten::as_strided"))}
            if kept:
                print("    not in kernels: " + ", ".join(f"{o.removeprefix('aten::')} x{n}"
                                                          for o, n in sorted(kept.items())))
            if a.code:
                want = a.code if a.code.startswith("g") else f"g0{a.code}"
                for t, i, k in rows:
                    if want == f"g{gi}{side}{i}":
                        print(k["loop"])
                        print(k["triton"])
    print(f"all graphs: at least {total_ms:.2f} ms of memory traffic in generated kernels")


if __name__ == "__main__":
    main()
