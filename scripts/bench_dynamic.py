"""Dynamic shapes, side by side (issue 35): a GPT-2-style and a BERT-style layer called at many
sequence lengths, compiled static (one compile per length) and dynamic (symbolic batch and
length, one compile), by ember and by Inductor, in one process. Prints a table: per model and
backend, the median ms per call over the lengths (each length timed after its warm-up: the best
of --rounds means of --reps calls), the compiles, and the compile seconds.

    python scripts/bench_dynamic.py [--device cpu|cuda] [--lengths 16,17,...] [--batch 2]
        [--reps 20] [--rounds 5] [--train] [--per-length] [--models gpt2,bert,hf_gpt2,hf_llama]
        [--backends eager,ember-static,...] [--dtype float32|bfloat16] [--layers 4]

--train times training steps instead: each call is the forward and a backward of
`out.square().mean()` (gradients set to None between calls), compiled as joint graphs.
--per-length also prints, per model, the ms per call of every backend at each length.
--models picks the models: the suite's GPT-2 and BERT layers (the default), and transformers'
GPT2LMHeadModel and LlamaForCausalLM (hf_gpt2, hf_llama: --layers layers of width --width, random
weights, no cache; their logits are the output), called on token ids.
--backends picks the rows: eager, ember-static, ember-dynamic (batch and length marked maybe
dynamic), ember-all (ember.compile(dynamic=True)), inductor-static (a fresh compile per
length), inductor-dynamic.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python", "differential"))
from test_diff_dynamic_shapes import BertLayer, GPT2Layer  # noqa: E402

import ember  # noqa: E402


class LogitsOf(torch.nn.Module):
    """A transformers causal LM called on token ids, its logits the output."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(input_ids=ids).logits


def hf_model(name, width, layers):
    import transformers  # noqa: PLC0415
    if name == "hf_gpt2":
        cfg = transformers.GPT2Config(n_embd=width, n_layer=layers, n_head=4, n_positions=1024,
                                      use_cache=False, pad_token_id=0)
        return LogitsOf(transformers.GPT2LMHeadModel(cfg))
    cfg = transformers.LlamaConfig(vocab_size=32000, hidden_size=width,
                                   intermediate_size=width * 11 // 4, num_hidden_layers=layers,
                                   num_attention_heads=4, num_key_value_heads=2,
                                   max_position_embeddings=1024, use_cache=False)
    return LogitsOf(transformers.LlamaForCausalLM(cfg))


def inputs(model, B, T, device, C):
    if model in ("hf_gpt2", "hf_llama"):
        return [torch.randint(0, 1000, (B, T), device=device)]
    x = torch.randn(B, T, C, device=device)
    if model is BertLayer:
        mask = torch.ones(B, T, dtype=torch.long, device=device)
        mask[:, T // 2:] = 0
        return [x, mask]
    return [x]


def make(backend, dynamic, m):
    if backend == "eager":
        return m
    if backend == "ember":
        # A fresh cache per compile: the static rows compile once per length (past the cache
        # limit of 8 a frame would run uncompiled), and the dynamic ones start from none.
        ember._C.clear_capture_cache(None)
        return ember.compile(m, dynamic={False: False, True: None, "all": True}[dynamic])
    torch._dynamo.reset()
    return torch.compile(m, backend="inductor", dynamic=False if not dynamic else None)


def timed(fn, args, device, reps, rounds):
    """ms per call: the best of `rounds` means of `reps` calls (the minimum drops the rounds a
    busy machine slowed down)."""
    def sync():
        if device == "cuda":
            torch.cuda.synchronize()
    for _ in range(3):
        fn(*args)
    sync()
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn(*args)
        sync()
        best = min(best, (time.perf_counter() - t0) / reps * 1e3)
    return best


def step_of(fn, m):
    """A training step of `fn` (the module `m`, compiled or not)."""
    def step(*args):
        fn(*args).square().mean().backward()
        for p in m.parameters():
            p.grad = None
    return step


# The rows: a backend and its dynamic mode (False static, True batch and length marked
# maybe_mark_dynamic, "all" ember.compile(dynamic=True) with nothing marked: every dim a symbol,
# the width pinned to the weights' by the first norm or product).
BACKENDS = {"eager": ("eager", False), "ember-static": ("ember", False),
            "ember-dynamic": ("ember", True), "ember-all": ("ember", "all"),
            "inductor-static": ("inductor", False), "inductor-dynamic": ("inductor", True)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--lengths", default="16,17,31,64,100,128,255,256,512")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5, help="timed rounds per length; the best")
    ap.add_argument("--train", action="store_true", help="forward and backward steps")
    ap.add_argument("--per-length", action="store_true", help="a table of ms per length too")
    ap.add_argument("--models", default="gpt2,bert")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--dtype", default="float32", help="the models' parameters' dtype")
    ap.add_argument("--layers", type=int, default=4, help="transformers models' layers")
    a = ap.parse_args()
    lengths = [int(t) for t in a.lengths.split(",")]
    print(f"torch {torch.__version__}, device {a.device}, batch {a.batch}, width {a.width}, "
          f"dtype {a.dtype}, lengths {lengths}{', training steps' if a.train else ''}")
    print(f"{'model':10} {'backend':18} {'median ms':>10} {'compiles':>9} {'compile s':>10}")
    suite = {"gpt2": GPT2Layer, "bert": BertLayer}
    for model in [suite.get(n, n) for n in a.models.split(",")]:
        per_length = {}
        torch.manual_seed(0)
        if isinstance(model, str):
            m = hf_model(model, a.width, a.layers)
        else:
            m = model(C=a.width, H=4, **({"max_len": 1024} if model is GPT2Layer else {}))
        m = m.to(a.device, getattr(torch, a.dtype))
        m = m.train() if a.train else m.eval()
        model_name = model if isinstance(model, str) else model.__name__
        for backend, dynamic in [BACKENDS[b] for b in a.backends.split(",")]:
            ms, compile_s, compiles = [], 0.0, 0
            fn = None if backend != "eager" else m
            call = fn if not a.train or fn is None else step_of(fn, m)
            ember.metrics.reset()
            with contextlib.nullcontext() if a.train else torch.no_grad():
                for T in lengths:
                    args = [x.to(getattr(torch, a.dtype)) if x.is_floating_point() else x
                            for x in inputs(model, a.batch, T, a.device, a.width)]
                    if dynamic is True:
                        for x in args:
                            torch._dynamo.maybe_mark_dynamic(x, 0)
                            torch._dynamo.maybe_mark_dynamic(x, 1)
                    if fn is None or (not dynamic and backend != "eager"):
                        fn = make(backend, dynamic, m)
                        call = fn if not a.train else step_of(fn, m)
                    t0 = time.perf_counter()
                    call(*args)
                    first = time.perf_counter() - t0
                    ms.append(timed(call, args, a.device, a.reps, a.rounds))
                    steady = ms[-1] / 1e3
                    if first > 5 * steady + 0.05:  # this call compiled
                        compile_s += first - steady
                        compiles += 1
            name = (f"{backend} dynamic=True" if dynamic == "all" else
                    f"{backend}{' dynamic' if dynamic else ' static' if backend != 'eager' else ''}")
            print(f"{model_name:10} {name:18} {statistics.median(ms):10.3f} {compiles:9d} "
                  f"{compile_s:10.2f}", flush=True)
            per_length[name] = ms
        if a.per_length:
            print(f"{model_name} ms per length: " + " ".join(f"{T:>7}" for T in lengths))
            for name, ms in per_length.items():
                print(f"  {name:18} " + " ".join(f"{t:7.3f}" for t in ms))


if __name__ == "__main__":
    main()
