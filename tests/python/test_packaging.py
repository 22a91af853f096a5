"""Packaging: the installed ember pins the torch it was built against (torch==X.Y.*, from
packaging/torch_pin.py), and importing it under another torch is a clear ImportError naming both
versions (python/ember/__init__.py). scripts/test_wheel.sh builds the wheel and installs it in a
fresh virtual environment (CI runs it)."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import torch

import ember._build_info as build_info


def _minor(version: str) -> str:
    return ".".join(version.split("+")[0].split(".")[:2])


def test_the_install_pins_the_torch_it_was_built_against():
    assert _minor(build_info.TORCH_VERSION) == _minor(torch.__version__)
    requires = importlib.metadata.requires("ember") or []
    assert f"torch=={_minor(build_info.TORCH_VERSION)}.*" in requires, requires


def test_another_torch_is_a_clear_import_error():
    code = "import torch\ntorch.__version__ = '2.99.1'\nimport ember\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ember was built against torch "), r.stderr
    assert build_info.TORCH_VERSION in last and "2.99.1" in last, last


def test_the_same_minor_imports():
    patch = torch.__version__.split("+")[0].split(".")
    other = ".".join(patch[:2] + ["99"])  # another patch release of the same minor
    code = f"import torch\ntorch.__version__ = '{other}'\nimport ember\nprint('ok')\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr
