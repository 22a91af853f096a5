"""The OpInfo sweep's tally in pytest's terminal summary (see test_opinfo_sweep.py)."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import opinfo_sweep_lib as lib  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if not lib.RECORDED:
        return
    total = {k: 0 for k in lib.KINDS}
    for _, results in lib.RECORDED:
        for k, v in lib.tally(results).items():
            total[k] += v
    ok, fused = lib.rates(total)
    mode = "full" if lib.full_sweep() else f"bounded, <= {lib.samples_per_case()} samples per case"
    tr = terminalreporter
    tr.write_sep("-", f"ember OpInfo sweep ({mode})")
    tr.write_line(f"{len(lib.RECORDED)} (op, dtype) cases, {sum(total.values())} samples: "
                  + ", ".join(f"{k} {total[k]}" for k in lib.KINDS))
    tr.write_line(f"correctness pass rate {ok:.1%}; fused rate {fused:.1%}")
    for cid, results in lib.RECORDED:
        for r in results:
            if r.kind in ("fail", "fallback"):
                tr.write_line(f"  {r.kind}: {cid} sample {r.index} {r.desc}: {' '.join(r.message.split())[:300]}")
