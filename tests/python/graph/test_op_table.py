"""The op table (src/graph/ops.def): every row names an operator of the installed torch, so an
operator renamed or removed in a new torch fails here, not by ember silently never matching it;
and op names are compared nowhere else in src/. (tests/cpp/graph/ops_test.cpp covers the
name <-> kind round trip.)"""

from __future__ import annotations

import re
from pathlib import Path

import torch

import ember._C as C

SRC = Path(__file__).resolve().parents[3] / "src"

# Files whose op-name compares are still to be converted to OpKind (issue 34, part 3).
NOT_YET_CONVERTED: set[str] = set()


def test_every_row_names_an_operator_of_this_torch():
    names = C.op_table_names()
    assert len(names) == len(set(names)), "a name in two rows"
    missing = [n for n in names if not torch._C._jit_get_schemas_for_operator(n)]
    assert not missing, f"ops.def rows that this torch ({torch.__version__}) lacks: {missing}"


def test_rows_are_operator_names_without_overloads():
    """ATen's operators, and ember's own (ember::fused_attention, registered by _C)."""
    for name in C.op_table_names():
        assert re.fullmatch(r"(aten|ember)::\w+", name), name


def test_no_op_name_compares_outside_the_table():
    """`== "aten::..."` and `!= "aten::..."` appear nowhere in src/: code switches on
    graph::OpKind (graph/ops.h)."""
    offenders = []
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".h", ".cpp") or str(path.relative_to(SRC)) in NOT_YET_CONVERTED:
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("//")[0]
            if re.search(r'[!=]=\s*"aten::', code):
                offenders.append(f"{path.relative_to(SRC)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_every_overload_the_code_names_exists():
    """Rows are operator names; the code names overloads next to the kind: `{OpKind::sum,
    "dim_IntList"}` in rule tables, `op.is(OpKind::scatter, "src")`, `op.is(OpKind::relu)` for the
    default overload. Each must be an overload of this torch."""
    named = set()
    for path in sorted(SRC.rglob("*.cpp")):
        text = path.read_text()
        where = str(path.relative_to(SRC))
        for m in re.finditer(r'OpKind::(\w+),\s*"(\w*)"', text):
            named.add((m[1], m[2], where))
        for m in re.finditer(r"\bis\(\s*(?:graph::)?OpKind::(\w+)\)", text):
            named.add((m[1], "", where))
    assert len(named) > 100
    missing = []
    for name, overload, where in sorted(named):
        schemas = torch._C._jit_get_schemas_for_operator(f"aten::{name}")
        if overload not in {s.overload_name for s in schemas}:
            missing.append(f"{where}: aten::{name}.{overload or '<default>'}")
    assert not missing, "\n".join(missing)
