"""timm on the CPU machine without torchvision's CUDA wheel, for scripts/zoo_sweep.py.

timm needs torch 2.14.1 through torchvision; the CPU machine has torch 2.13.0. timm's model code
uses torchvision for one class (FrozenBatchNorm2d) and its data pipeline (transforms, datasets)
at import, so with a stand-in for those imports every timm model builds and runs on torch
2.13.0. The stand-in is for importing timm only: a sweep row whose model calls into torchvision
would fail (none did in the first 97 names). Set up once:

    W=/tmp/timm_cpu && mkdir -p $W/site && cd $W
    pip download timm pillow --no-deps -d .   # from the local index
    for w in *.whl; do unzip -q -o $w -d site; done

then run the sweep with this folder first on PYTHONPATH:

    ZOO_TIMM_SITE=/tmp/timm_cpu/site PYTHONPATH=scripts/zoo_timm_cpu \\
        python scripts/zoo_sweep.py --family timm --jobs 1 --image-cap 128 --json timm_cpu.json
"""

import importlib.abc
import importlib.machinery
import os
import sys
import types

_site = os.environ.get("ZOO_TIMM_SITE")
if _site:
    sys.path.insert(0, _site)

    class _AnyMeta(type):
        def __getattr__(cls, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return name  # enum members (InterpolationMode.NEAREST) as their names

    class _Any(metaclass=_AnyMeta):
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return _Any()

    class _Module(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (_Any,), {})

    def _frozen_batch_norm():
        import torch

        class FrozenBatchNorm2d(torch.nn.Module):
            def __init__(self, num_features, eps=1e-5):
                super().__init__()
                self.eps = eps
                self.register_buffer("weight", torch.ones(num_features))
                self.register_buffer("bias", torch.zeros(num_features))
                self.register_buffer("running_mean", torch.zeros(num_features))
                self.register_buffer("running_var", torch.ones(num_features))

            def forward(self, x):
                scale = self.weight * (self.running_var + self.eps).rsqrt()
                shift = self.bias - self.running_mean * scale
                return x * scale.reshape(1, -1, 1, 1) + shift.reshape(1, -1, 1, 1)

        return FrozenBatchNorm2d

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, fullname, path, target=None):
            if fullname == "torchvision" or fullname.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
            return None

        def create_module(self, spec):
            return _Module(spec.name)

        def exec_module(self, module):
            module.__path__ = []
            if module.__name__ == "torchvision.ops.misc":
                module.FrozenBatchNorm2d = _frozen_batch_norm()

    sys.meta_path.insert(0, _Finder())
