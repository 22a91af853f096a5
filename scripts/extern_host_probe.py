"""Where an ATen call from ember's executor spends its host time on the GPU (issue 40).

For chains of 1x1 convolutions and of linear layers at batch 1 (bf16), compares the host time per
op of eager (no_grad and inference_mode, Python included) with ember's extern steps
(EMBER_HOST_STEP_TIMES=1: `extern` us each), and counts the CUDA runtime calls per op in a
profiled call of each.

    EMBER_HOST_STEP_TIMES=1 python3 scripts/extern_host_probe.py
"""
import collections
import time

import torch

import ember
from ember import _C

dev = "cuda"
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True


def host_us(fn, n=300):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n):
        fn()
    h = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return h


def api_counts(fn):
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA]) as p:
        fn()
        torch.cuda.synchronize()
    c = collections.Counter()
    for e in p.events():
        if e.device_type == torch.autograd.DeviceType.CPU:
            c[e.name] += 1
    return c


def chain(kind, depth=10):
    if kind == "conv":
        layers = [torch.nn.Conv2d(256, 256, 1, bias=False) for _ in range(depth)]
        x = torch.randn(1, 256, 14, 14)
        m = torch.nn.Sequential(*layers).to(dev, torch.bfloat16).to(memory_format=torch.channels_last)
        x = x.to(dev, torch.bfloat16).to(memory_format=torch.channels_last)
    else:
        m = torch.nn.Sequential(*[torch.nn.Linear(768, 768, bias=kind == "linear")
                                  for _ in range(depth)])
        m = m.to(dev, torch.bfloat16)
        x = torch.randn(128, 768, device=dev, dtype=torch.bfloat16)
    return m.eval(), x


for kind, bench in (("conv", "default"), ("conv", "benchmark"), ("linear", "default"),
                    ("linear_nobias", "default")):
    if True:
        torch.backends.cudnn.benchmark = bench == "benchmark"
        m, x = chain(kind)
        with torch.no_grad():
            e_ng = host_us(lambda: m(x)) / 10
        with torch.inference_mode():
            e_im = host_us(lambda: m(x)) / 10
        with torch.no_grad():
            compiled = ember.compile(m)
            compiled(x)
            _C.reset_host_step_times()
            em = host_us(lambda: compiled(x)) / 10
            steps = {k: (v["count"], v["seconds"] * 1e6 / max(1, v["count"]))
                     for k, v in _C.host_step_times().items() if v["count"]}
            ec = api_counts(lambda: compiled(x))
            ea = api_counts(lambda: m(x))
        with torch.inference_mode():
            _C.reset_host_step_times()
            em_im = host_us(lambda: compiled(x)) / 10
            steps_im = {k: (v["count"], v["seconds"] * 1e6 / max(1, v["count"]))
                        for k, v in _C.host_step_times().items() if v["count"]}
        print(f"{kind} cudnn.benchmark={bench == 'benchmark'}: host us per op: eager no_grad {e_ng:.1f}, "
              f"eager inference_mode {e_im:.1f}, ember no_grad {em:.1f}, ember inference_mode {em_im:.1f}",
              flush=True)
        print("   ember steps no_grad:", {k: f"{c} x {u:.1f} us" for k, (c, u) in steps.items()})
        print("   ember steps inference_mode:", {k: f"{c} x {u:.1f} us" for k, (c, u) in steps_im.items()})
        keys = sorted(set(ec) | set(ea), key=lambda k: -(ec[k] + ea[k]))[:22]
        print("   profiled calls per call (ember / eager):",
              ", ".join(f"{k}: {ec[k]}/{ea[k]}" for k in keys), flush=True)

# The LM head's blocked product against the padded one and its copy (Note [Padded products in row
# blocks]): BertForMaskedLM's head at batch 16 x 512, bf16.
try:
    a = torch.randn(8192, 768, device=dev, dtype=torch.bfloat16)
    b = torch.randn(768, 30528, device=dev, dtype=torch.bfloat16)
    bias = torch.randn(30528, device=dev, dtype=torch.bfloat16)
    def padded():
        return torch.addmm(bias, a, b).narrow(1, 0, 30522).contiguous()
    sliced = lambda: torch.ops.ember.matmul_sliced(a, b, bias, 30522)

    def blocks_of(rows):
        def run():
            out = torch.empty(8192, 30522, device=dev, dtype=torch.bfloat16)
            block = torch.empty(rows, 30528, device=dev, dtype=torch.bfloat16)
            for r0 in range(0, 8192, rows):
                r = min(rows, 8192 - r0)
                t = block[:r]
                torch.addmm(bias, a[r0:r0 + r], b, out=t)
                out[r0:r0 + r].copy_(t[:, :30522])
            return out
        return run
    for name, fn in (("padded+copy", padded), ("matmul_sliced", sliced),
                     ("product alone", lambda: torch.addmm(bias, a, b)),
                     ("blocks of 512 rows", blocks_of(512)), ("blocks of 1024 rows", blocks_of(1024)),
                     ("blocks of 2048 rows", blocks_of(2048))):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(20):
            fn()
        e.record()
        torch.cuda.synchronize()
        print(f"LM head {name}: {s.elapsed_time(e) / 20:.3f} ms", flush=True)
except Exception as ex:  # noqa: BLE001
    print("LM head probe failed:", ex)
