"""ember's steps in torch.profiler's timeline (issue 37, observability): each call of a compiled
graph is one `ember::graph` range, and each generated kernel's launch one
`ember::<kernel name>_fused_<its ops>` range inside it, so a profile attributes host time to ember's kernels as it does to ATen's ops.
Extern steps appear as the ATen ops they call, inside the graph's range."""

from __future__ import annotations

import torch

import ember
import ember._C as C
from ember.tracing import trace_with_structure


def kernel_names(compiled) -> list[str]:
    # describe_steps: "kernel <name>..." for each kernel step
    return [s.split()[1].rstrip(":") for s in compiled.describe_steps() if s.startswith("kernel ")]


def profiled_ranges(fn, *args) -> list:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        fn(*args)
    return [e for e in prof.events() if e.name.startswith("ember::")]


def kernel_of(event_name: str) -> str:
    """The kernel a range names: ember::k1_fused_relu_mul -> k1."""
    return event_name.removeprefix("ember::").split("_fused")[0]


def ranges_nest(events) -> bool:
    graphs = [e for e in events if e.name == "ember::graph"]
    inner = [e for e in events if e.name != "ember::graph"]
    return all(any(g.time_range.start <= k.time_range.start and k.time_range.end <= g.time_range.end
                   for g in graphs) for k in inner)


def f(x, w):
    return torch.layer_norm(torch.relu(x @ w) * 2, [x.shape[-1]]) + 1


def test_a_call_is_one_graph_range_with_one_range_per_kernel():
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    graph, _ = trace_with_structure(f, [x, w])
    compiled = C.CompiledGraph(graph)
    names = kernel_names(compiled)
    assert names, compiled.describe_steps()
    events = profiled_ranges(compiled, x, w)
    assert [e.name for e in events if e.name == "ember::graph"] == ["ember::graph"]
    assert sorted(kernel_of(e.name) for e in events if e.name != "ember::graph") == sorted(names)
    # Each range says what its kernel fuses (the ops of its nodes, views left out).
    labels = [e.name for e in events if e.name != "ember::graph"]
    assert all("_fused_" in n for n in labels), labels
    assert any("relu" in n and "mul" in n for n in labels), labels
    assert ranges_nest(events)


SYMBOLIC = """graph {
  symbol s0 : [2, inf] hint 7 "L['x'].size()[0]"
  input %0 : f32[s0, 16] cpu  # user x
  input %1 : f32[16] cpu  # user b
  %2 : f32[s0, 16] cpu = aten::add.Tensor(%0, %1, alpha=1)
  %3 : f32[s0, 16] cpu = aten::relu(%2)
  %4 : f32[s0] cpu = aten::sum.dim_IntList(%3, [1], False, dtype=None)
  return (%4)
}
"""


def test_a_graph_over_shape_symbols_has_the_same_ranges():
    compiled = C.CompiledGraph(C.parse_traced_graph(SYMBOLIC))
    names = kernel_names(compiled)
    assert names, compiled.describe_steps()
    for n in (3, 40):
        events = profiled_ranges(compiled, torch.randn(n, 16), torch.randn(16))
        assert sorted(kernel_of(e.name) for e in events) == sorted(["graph"] + names)
        assert ranges_nest(events)


def test_ember_compile_shows_its_graphs_in_the_profiler():
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU(), torch.nn.LayerNorm(16))
    compiled = ember.compile(model)
    x = torch.randn(4, 16)
    with torch.no_grad():
        compiled(x)
        events = profiled_ranges(compiled, x)
    assert sum(e.name == "ember::graph" for e in events) == 1
    assert any(e.name != "ember::graph" for e in events)  # its kernels
    assert ranges_nest(events)


def linear_bf16(x, w, b):
    return torch.relu(x @ w.to(torch.bfloat16).t() + b.to(torch.bfloat16))


def test_a_kept_parameter_kernel_has_no_range():
    """A kernel of parameters only (a weight's cast) whose outputs are kept from the last call
    launches nothing: no range for it, so a profile counts only the kernels that ran."""
    x = torch.randn(8, 16, dtype=torch.bfloat16)
    w, b = torch.randn(32, 16), torch.randn(32)
    graph, _ = trace_with_structure(linear_bf16, (x, w, b), kinds=["user", "param", "param"])
    compiled = C.CompiledGraph(graph)
    assert compiled.num_parameter_kernels >= 1, compiled.describe_steps()
    names = kernel_names(compiled)
    first = [kernel_of(e.name) for e in profiled_ranges(compiled, x, w, b)]
    assert sorted(first) == sorted(["graph"] + names)  # the first call runs every kernel
    again = [kernel_of(e.name) for e in profiled_ranges(compiled, x, w, b)]
    assert len(again) == len(first) - compiled.num_parameter_kernels, (first, again)
