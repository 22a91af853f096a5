"""ember.config: one typed object of options (src/support/options.h), filled at the Python
boundary. Values come from overrides (`ember.config.x = v`, `patch`), else the environment, else
the default; `options=` overrides per compile; no code below the boundary reads the environment.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

import ember
import ember._C as C
import ember.config as config
from ember.errors import CompileError

SRC = pathlib.Path(__file__).resolve().parents[3] / "src"


def test_no_stage_reads_the_environment():
    """The boundary is python/ember/config.py: `getenv` and `environ` appear nowhere in src/
    (comments aside)."""
    offenders = []
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cpp", ".c", ".def"):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            if re.search(r"\bgetenv\b|\benviron\b|secure_getenv", code):
                offenders.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_option_has_a_documented_variable():
    doc = (SRC.parent / "docs" / "env_vars.md").read_text()
    for o in config.OPTIONS:
        assert o.env[0] in doc, o.env[0]
        assert o.name in doc, o.name


def test_value_order_override_then_environment_then_default(monkeypatch):
    monkeypatch.delenv("EMBER_COMBO_KERNELS", raising=False)
    assert config.combo_kernels is True
    monkeypatch.setenv("EMBER_COMBO_KERNELS", "0")
    assert config.combo_kernels is False
    with config.patch(combo_kernels=True):
        assert config.combo_kernels is True
        assert config.compile_options()["sched.combo_kernels"] is True
    assert config.combo_kernels is False
    config.combo_kernels = True
    try:
        assert config.combo_kernels is True
    finally:
        del config.combo_kernels
    assert config.combo_kernels is False


def test_patch_restores_an_outer_patch():
    with config.patch(codegen=False):
        with config.patch(codegen=True):
            assert config.codegen is True
        assert config.codegen is False


def test_unknown_options_and_wrong_types_are_user_errors():
    with pytest.raises(AttributeError, match="no option 'kodegen'"):
        config.patch(kodegen=False).__enter__()
    with pytest.raises(AttributeError, match="no option"):
        config.compile_options({"nope": 1})
    with pytest.raises(CompileError, match="'codegen' must be bool"):
        config.compile_options({"codegen": "yes"})
    with pytest.raises(CompileError, match="unknown option sched.nope"):
        C.TraceSession(options={"sched.nope": True})
    with pytest.raises(CompileError, match="expected a bool"):
        C.TraceSession(options={"sched.codegen": 1})


def test_a_bad_variable_names_itself(monkeypatch):
    monkeypatch.setenv("EMBER_CACHE_MAX_MB", "lots")
    with pytest.raises(CompileError, match="EMBER_CACHE_MAX_MB='lots'"):
        config.compile_options()


def kernels_of(fn, x, **compile_kwargs):
    compiled = ember.compile(fn, **compile_kwargs)
    torch.testing.assert_close(compiled(x), fn(x))
    return ember.capture.records()[-1]["kernels"]


def f(x):
    return torch.sin(x) * 2 + 1


def test_options_reach_the_compiler_per_compile():
    """options= (by option name) and patch() both decide what the compiled graph is."""
    x = torch.randn(64)
    assert kernels_of(f, x) >= 1
    assert kernels_of(f, x, options={"codegen": False}) == 0
    with config.patch(codegen=False):
        assert kernels_of(f, x) == 0
        assert kernels_of(f, x, options={"codegen": True}) >= 1


def test_options_reach_torch_compile_backend():
    x = torch.randn(64)
    torch._dynamo.reset()
    g = torch.compile(f, backend="ember", options={"codegen": False})
    torch.testing.assert_close(g(x), f(x))


def test_trace_options_decide_the_rewrites():
    """A trace-time rewrite (the CUDA-only split of a global group norm, on the CPU when
    trace.splits_everywhere) follows the session's options, not the process environment."""
    x = torch.randn(8, 512, 4001)

    def gn(t):
        return torch.nn.functional.group_norm(t, 1)
    assert "aten::native_group_norm" in ember.trace(gn, [x]).ops
    with config.patch(splits_everywhere=True):
        assert "aten::native_group_norm" not in ember.trace(gn, [x]).ops
    assert "aten::native_group_norm" not in ember.trace(
        gn, [x], options={"splits_everywhere": True}).ops


@pytest.fixture
def handed_options(monkeypatch):
    """The options dicts the entry points hand to the C++ boundary, in order."""
    seen = []
    real = config.compile_options

    def spy(overrides=None):
        out = real(overrides)
        seen.append(out)
        return out

    monkeypatch.setattr(config, "compile_options", spy)
    return seen


@pytest.mark.parametrize("mode, cuda_graphs, templates", [
    (None, False, False), ("default", False, False), ("reduce-overhead", True, False),
    ("max-autotune", True, True), ("max-autotune-no-cudagraphs", False, True)])
@pytest.mark.parametrize("entry", ["ember.compile", "torch.compile"])
def test_mode_reaches_the_compiler_from_both_entry_points(handed_options, entry, mode,
                                                          cuda_graphs, templates):
    # torch.compile(backend="ember", mode=...) passes its mode to the backend (not "default");
    # both entry points turn it into the same options (CUDA graphs, matmul templates; on the
    # CPU neither changes the program).
    x = torch.randn(8)
    torch._dynamo.reset()
    compile_fn = ember.compile if entry == "ember.compile" else torch.compile
    kw = {} if entry == "ember.compile" else {"backend": "ember"}
    g = compile_fn(f, mode=mode, **kw)
    torch.testing.assert_close(g(x), f(x))
    got = handed_options[-1]
    assert (got["runtime.cuda_graphs"], got["runtime.matmul_templates"]) == (cuda_graphs,
                                                                            templates)


@pytest.mark.parametrize("entry", ["ember.compile", "torch.compile"])
def test_options_by_inductor_names_and_errors(handed_options, entry):
    x = torch.randn(8)
    torch._dynamo.reset()
    compile_fn = ember.compile if entry == "ember.compile" else torch.compile
    kw = {} if entry == "ember.compile" else {"backend": "ember"}
    g = compile_fn(f, options={"triton.cudagraphs": True, "max_autotune": True}, **kw)
    torch.testing.assert_close(g(x), f(x))
    assert handed_options[-1]["runtime.cuda_graphs"] and handed_options[-1][
        "runtime.matmul_templates"]
    with pytest.raises(Exception, match="unknown option 'epilogue_fusion'"):
        torch._dynamo.reset()
        compile_fn(f, options={"epilogue_fusion": True}, **kw)(x)


def test_ember_compile_mode_errors_as_torch_compile():
    with pytest.raises(CompileError, match="unknown mode 'fast'"):
        ember.compile(f, mode="fast")
    with pytest.raises(CompileError, match="either mode or options"):
        ember.compile(f, mode="max-autotune", options={"codegen": False})
    with pytest.raises(RuntimeError, match="Either mode or options"):
        torch.compile(f, backend="ember", mode="max-autotune", options={"codegen": False})
