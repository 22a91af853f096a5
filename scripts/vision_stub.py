"""A stand-in `torchvision` and `PIL` for planning timm models on the CPU machine, where timm's
real dependencies (torch 2.14.1's CUDA build) are kept out: importing this first makes every
`torchvision.*` and `PIL.*` import succeed with placeholder attributes, enough for timm to build
its models (never to run its data transforms). For scripts/plan_training_graphs.py only:

    pip install --no-deps --target /tmp/timmlib timm
    PYTHONPATH=/tmp/timmlib python scripts/plan_training_graphs.py timm_convnext_tiny --vision-stub
"""
import importlib.abc
import importlib.machinery
import sys
import types

STUBBED = ("torchvision", "PIL")


class _Placeholder(type):
    """A class whose every attribute is another placeholder class (Image.Resampling.BILINEAR)."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(name, (object,), {})


class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name == "__version__":
            return "10.0.0"
        if name.startswith("__"):
            raise AttributeError(name)
        if name[0].isupper():
            return _Placeholder(name, (object,), {"__init__": lambda self, *a, **k: None})
        return lambda *a, **k: None


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module):
        pass


def install() -> None:
    """Stubs the packages for the rest of the process (real ones already imported stay)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
