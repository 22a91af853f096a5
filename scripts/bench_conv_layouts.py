"""Times eager convolutions on CUDA in each operand layout and lists the kernels each runs, to
decide which layout a class of convolution should get (src/rewrite/conv_layout.h).

    python3 scripts/bench_conv_layouts.py                      # the built-in cases
    python3 scripts/bench_conv_layouts.py --case 64,1392,14,14,1392,3,6,1

A case is N,C,H,W,K,kernel,groups,stride. Per case and layout (input NCHW or NHWC, weight
contiguous or channels-last), with cudnn.benchmark off and on: the median of --repeat timed calls
(CUDA events) and the profiler's kernels per call, by total time.
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

CASES = [
    # RegNetY-32GF's grouped 3x3 convolutions (232 channels per group), batch 64.
    (64, 696, 28, 28, 696, 3, 3, 1),
    (64, 1392, 14, 14, 1392, 3, 6, 1),
    (64, 3712, 7, 7, 3712, 3, 16, 1),
    # NFNet-F4's grouped 3x3 (128 channels per group), batch 8.
    (8, 768, 64, 64, 768, 3, 6, 1),
    # A ResNeXt 32x4d one (4 channels per group) and a depthwise one.
    (64, 256, 28, 28, 256, 3, 32, 1),
    (64, 384, 28, 28, 384, 3, 384, 1),
    # Squeeze-and-excitation's 1x1 convolution on a 1x1 map.
    (64, 1392, 1, 1, 348, 1, 1, 1),
]


def timed(fn, repeat):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeat):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def kernels(fn, calls=5):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "device_time_total", None) or getattr(e, "cuda_time_total", 0)
        if t > 0 and e.count > 0:
            rows.append((t / calls / 1000.0, e.count // calls, e.key))
    rows.sort(reverse=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--case", action="append", default=[],
                    help="N,C,H,W,K,kernel,groups,stride (repeatable)")
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "f16", "f32"))
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--top", type=int, default=4)
    args = ap.parse_args()
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    cases = [tuple(int(v) for v in c.split(",")) for c in args.case] or CASES
    cl = torch.channels_last
    for n, c, h, w, k, ks, g, s in cases:
        x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
        wt = torch.randn(k, c // g, ks, ks, device="cuda", dtype=dtype) * 0.05
        print(f"== x {n}x{c}x{h}x{w}, weight {k}x{c // g}x{ks}x{ks}, groups {g}, stride {s}, "
              f"{args.dtype}", flush=True)
        for bench in (False, True):
            torch.backends.cudnn.benchmark = bench
            for name, xi, wi in (("input NCHW, weight NCHW", x, wt),
                                 ("input NHWC, weight NCHW", x.to(memory_format=cl), wt),
                                 ("input NHWC, weight NHWC", x.to(memory_format=cl),
                                  wt.to(memory_format=cl)),
                                 ("input NCHW, weight NHWC", x, wt.to(memory_format=cl))):
                def fn(xi=xi, wi=wi):
                    return F.conv2d(xi, wi, None, s, ks // 2, 1, g)
                ms = timed(fn, args.repeat)
                out = fn()
                layout = "NHWC" if out.is_contiguous(memory_format=cl) and not out.is_contiguous() \
                    else "NCHW"
                top = "; ".join(f"{t:.3f} ms x{cnt} {key[:70]}"
                                for t, cnt, key in kernels(fn)[:args.top])
                print(f"  benchmark={int(bench)} {name}: {ms:.3f} ms -> {layout} | {top}",
                      flush=True)
    torch.backends.cudnn.benchmark = False


if __name__ == "__main__":
    main()
