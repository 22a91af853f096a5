"""Host cost per call of a 1x1 convolution on the GPU: F.conv2d against the same product
through torch.mm on the channels-last view, at batch 1, bf16 (src/rewrite/conv_as_product.h).
Host-bound loops (no sync inside) give host us per call; CUDA events give device us.

    python3 scripts/conv_host_probe.py
"""
import time

import torch
import torch.nn.functional as F

torch.backends.cudnn.benchmark = False
dev = "cuda"
shapes = [(64, 256, 56), (256, 64, 56), (512, 128, 28), (1024, 256, 14), (2048, 512, 7), (96, 576, 14), (40, 240, 28)]
def host_us(fn, n=2000):
    for _ in range(50): fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(n): fn()
    h = (time.perf_counter() - t) / n * 1e6
    torch.cuda.synchronize()
    return h
def dev_us(fn, n=200):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    fn(); torch.cuda.synchronize()
    # pad the queue so the GPU runs back to back
    torch.cuda._sleep(2_000_000)
    s.record()
    for _ in range(n): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3
with torch.inference_mode():
    for cin, cout, hw in shapes:
        x = torch.randn(1, cin, hw, hw, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        w = torch.randn(cout, cin, 1, 1, device=dev, dtype=torch.bfloat16).to(memory_format=torch.channels_last)
        x2 = x.permute(0, 2, 3, 1).reshape(hw * hw, cin)
        w2 = w.view(cout, cin).t()
        conv = lambda: F.conv2d(x, w)
        mm = lambda: torch.mm(x2, w2)
        cudnn = lambda: torch.cudnn_convolution(x, w, [0, 0], [1, 1], [1, 1], 1, False, False, True)
        e = lambda: torch.empty(hw * hw, cout, device=dev, dtype=torch.bfloat16)
        add = lambda: torch.add(x, 1.0)
        print(f"{cin:5d}->{cout:5d} @{hw:3d}: conv host {host_us(conv):6.1f} dev {dev_us(conv):6.1f} | "
              f"cudnn_convolution host {host_us(cudnn):6.1f} | mm host {host_us(mm):6.1f} dev {dev_us(mm):6.1f} | "
              f"empty {host_us(e):5.1f} add {host_us(add):5.1f}", flush=True)
