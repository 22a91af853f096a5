"""Whole model families for speed sweeps: every timm and torchvision classification model.

The suite (models.py) is a hand-picked sample; a family sweep runs every model a package lists, at
full size, to see whether ember's speed holds beyond that sample. Selectors (``--only``):

    zoo-timm                every name of timm.list_models()
    zoo-torchvision         every classification model of torchvision.models
    zoo-timm:resnet50       one model (the name a spec gets; what an isolated worker is given)

Models are registered lazily, when a selector names them: importing timm takes seconds and lists
about 1,300 names. A family's order is a fixed pseudo-random permutation of its names (by a hash of
each name, the same on every machine and run), so the first N of a sweep continued over several
calls (``bench_shards.py --skip-done``) are a uniform sample of the family, not its first letters.

Sizes: the model's default input (timm's pretrained config, 224 x 224 for torchvision, 299 for
inception_v3), 1,000 classes, random weights. Batch: 64 at 224 x 224, scaled down with the image
area to a power of two (at least 8): the TIMM harness runs 64 or 128 on an A100-40GB. Models over
``MAX_PARAMS`` parameters are skipped (like the suite's heavy models): a sweep measures the common
case, not compile times of giants.
"""

from __future__ import annotations

import hashlib
import importlib.util
from typing import Any, Callable

import torch

from . import models as M

FAMILIES = ("timm", "torchvision")
PREFIX = "zoo-"
MAX_PARAMS = 500_000_000
BASE_BATCH, BASE_PIXELS, MIN_BATCH = 64, 224 * 224, 8


class TooLarge(M.MissingPackage):
    """A model over MAX_PARAMS parameters: skipped, with its size as the reason."""


def sweep_order(names: list[str]) -> list[str]:
    """The names in a fixed pseudo-random order (sha1 of the name): any prefix is a uniform sample."""
    return sorted(set(names), key=lambda n: (hashlib.sha1(n.encode()).hexdigest(), n))


def batch_for(height: int, width: int) -> int:
    """64 at 224 x 224, scaled down with the image's area to a power of two, at least MIN_BATCH."""
    b = BASE_BATCH * BASE_PIXELS / max(1, height * width)
    p = MIN_BATCH
    while p * 2 <= min(b, BASE_BATCH):
        p *= 2
    return p


def family_names(family: str) -> list[str]:
    if family == "timm":
        import timm

        # timm's test_* entries are tiny stand-ins for its own unit tests, not models.
        return sweep_order([n for n in timm.list_models() if not n.startswith("test_")])
    if family == "torchvision":
        import torchvision

        return sweep_order(torchvision.models.list_models(module=torchvision.models))
    raise KeyError(f"unknown zoo family '{family}' (one of {', '.join(FAMILIES)})")


def _check_size(model: torch.nn.Module, name: str) -> None:
    n = sum(p.numel() for p in model.parameters())
    if n > MAX_PARAMS:
        raise TooLarge(f"{name}: {n / 1e6:.0f}M parameters, over the sweep's {MAX_PARAMS / 1e6:.0f}M")


def _timm_builder(name: str) -> Callable[..., M.Workload]:
    def builder(size: str, mode: str, device: str, batch_size: int | None) -> M.Workload:
        import timm
        import timm.data

        if size == "full":
            model = timm.create_model(name, pretrained=False, drop_rate=0.0)
            cfg = timm.data.resolve_data_config({}, model=model, use_test_size=mode != "training")
            c, h, w = (int(v) for v in cfg["input_size"])
            B = batch_size or batch_for(h, w)
        else:  # a CPU smoke run: the same model at its default width, small batch and image
            model = timm.create_model(name, pretrained=False, num_classes=10, drop_rate=0.0)
            cfg = timm.data.resolve_data_config({}, model=model)
            c, h, w = (int(v) for v in cfg["input_size"])
            B = batch_size or 2
        _check_size(model, name)
        x = torch.randn(B, c, h, w)
        return M.Workload(model, (x,), {}, M.reduce_to_scalar_loss, B, note=f"input {c}x{h}x{w}")

    return builder


def _torchvision_builder(name: str) -> Callable[..., M.Workload]:
    def builder(size: str, mode: str, device: str, batch_size: int | None) -> M.Workload:
        import torchvision

        kw: dict[str, Any] = {"weights": None}
        if name in ("inception_v3", "googlenet"):
            kw.update(aux_logits=False, init_weights=True)
        if size != "full":
            kw["num_classes"] = 10
        model = torchvision.models.get_model(name, **kw)
        _check_size(model, name)
        px = 299 if name == "inception_v3" else 224
        B = batch_size or (batch_for(px, px) if size == "full" else 2)
        return M.Workload(model, (torch.randn(B, 3, px, px),), {}, M.reduce_to_scalar_loss, B,
                          note=f"input 3x{px}x{px}")

    return builder


_BUILDERS = {"timm": _timm_builder, "torchvision": _torchvision_builder}
_PACKAGES = {"timm": "timm", "torchvision": "torchvision"}


def spec_name(family: str, name: str) -> str:
    return f"{PREFIX}{family}:{name}"


def register_one(family: str, name: str) -> M.ModelSpec:
    key = spec_name(family, name)
    if key in M.REGISTRY:
        return M.REGISTRY[key]
    if family not in _BUILDERS:
        raise KeyError(f"unknown zoo family '{family}' (one of {', '.join(FAMILIES)})")
    spec = M.ModelSpec(name=key, family=f"{PREFIX}{family}", package=_PACKAGES[family],
                       builder=_BUILDERS[family](name),
                       description=f"{family} {name}, random weights, default input")
    if family == "torchvision":
        spec.tol_inference, spec.tol_training = 1e-4, 1e-3
    return M.register(spec)


def expand(item: str) -> list[M.ModelSpec]:
    """The specs a ``zoo-...`` selector names, registered on first use."""
    body = item[len(PREFIX):]
    family, _, name = body.partition(":")
    if family not in _BUILDERS:
        raise KeyError(f"unknown zoo family '{family}' in '{item}' (one of {', '.join(FAMILIES)})")
    if name:
        return [register_one(family, name)]
    if importlib.util.find_spec(_PACKAGES[family]) is None:
        raise M.MissingPackage(f"package '{_PACKAGES[family]}' is not installed (needed by '{item}')")
    return [register_one(family, n) for n in family_names(family)]
