#!/usr/bin/env python3
"""The family sweep's standing over several report JSONs (issue 36's bars): per mode and dtype,
the models where eager, Inductor and ember.compile all ran (a model in several files: the last
file's run), the ember/Inductor speed-ratio geomean, the models below 0.9x of Inductor and below
eager, compile-time medians, and peak memory over eager's.

    python3 scripts/family_table.py docs/results/2026-12-06_family_bf16_*.json [--rows]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import statistics


def load_runs(paths: list[str]) -> dict[tuple, dict]:
    runs: dict[tuple, dict] = {}
    for path in paths:
        with open(path) as f:
            d = json.load(f)
        for r in d["runs"]:
            b = r.get("backends", {})
            if all(b.get(k, {}).get("median_ms") for k in ("eager", "inductor", "ember-capture")):
                runs[(r["mode"], r["dtype"], r["model"])] = dict(r, file=path)
    return runs


def until_tuned(b: dict) -> float | None:
    """Seconds until a backend runs at its steady speed: the compile (first call over eager's),
    the background compiles waited for after it (ember's tuning candidates), and the second
    call's time over a timed step (where those candidates are timed); None for a report made
    before the second call was timed."""
    extra = b.get("extra") or {}
    if b.get("compile_s") is None or "second_call_s" not in extra or not b.get("median_ms"):
        return None
    return (b["compile_s"] + extra.get("background_compile_s", 0.0)
            + max(0.0, extra["second_call_s"] - b["median_ms"] / 1e3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rows", action="store_true", help="print every model's row")
    a = ap.parse_args()
    # In the order given (a pattern's matches sorted): a model's run is the last file's, so a
    # rerun listed after the sweep replaces the sweep's row.
    paths = list(dict.fromkeys(p for pattern in a.files for p in sorted(glob.glob(pattern))))
    runs = load_runs(paths)
    for key in sorted({k[:2] for k in runs}):
        rows = []
        for (mode, dtype, model), r in sorted(runs.items()):
            if (mode, dtype) != key:
                continue
            b = r["backends"]
            e, i, m = (b[k]["median_ms"] for k in ("eager", "inductor", "ember-capture"))
            ok = all(b[k].get("status") == "pass" for k in ("inductor", "ember-capture"))
            mem = b["ember-capture"].get("peak_mem_mb"), b["eager"].get("peak_mem_mb")
            rows.append((model, e, i, m, i / m, b["inductor"].get("compile_s"),
                         b["ember-capture"].get("compile_s"), ok,
                         mem[0] / mem[1] if all(mem) else None,
                         until_tuned(b["inductor"]), until_tuned(b["ember-capture"])))
        ratio = [r[4] for r in rows]
        geo = math.exp(sum(math.log(x) for x in ratio) / len(ratio))
        behind = sorted((r for r in rows if r[4] < 0.9), key=lambda r: r[4])
        slower = [r for r in rows if r[3] > r[1]]
        ci = [r[5] for r in rows if r[5]]
        cm = [r[6] for r in rows if r[6]]
        mem_over = [r for r in rows if r[8] and r[8] > 1.1]
        print(f"[{key[0]}/{key[1]}] {len(rows)} models over {len(paths)} files: ember/Inductor "
              f"geomean {geo:.2f}x; {len(behind)} below 0.9x ({100 * len(behind) / len(rows):.0f}%);"
              f" {len(slower)} slower than eager; {sum(not r[7] for r in rows)} failing accuracy")
        if ci and cm:
            print(f"  compile s: ember median {statistics.median(cm):.1f} (max {max(cm):.1f}), "
                  f"Inductor median {statistics.median(ci):.1f} (max {max(ci):.1f}); ratio of "
                  f"medians {statistics.median(cm) / statistics.median(ci):.2f}")
        ti = [r[9] for r in rows if r[9] is not None and r[10] is not None]
        tm = [r[10] for r in rows if r[9] is not None and r[10] is not None]
        if ti:
            print(f"  until tuned s (the first call, the background's compiles and what the second "
                  f"call spends over a step, over {len(ti)} models): ember median "
                  f"{statistics.median(tm):.1f}, Inductor median {statistics.median(ti):.1f}; "
                  f"ratio of medians {statistics.median(tm) / statistics.median(ti):.2f}")
        print(f"  peak memory over eager's by >10%: "
              + (", ".join(f"{r[0]} {r[8]:.2f}x" for r in mem_over) or "none"))
        for r in behind:
            print(f"  behind: {r[0]} eager {r[1]:.2f} / Inductor {r[2]:.2f} / ember {r[3]:.2f} ms"
                  f" ({r[4]:.2f}x)")
        for r in slower:
            print(f"  slower than eager: {r[0]} eager {r[1]:.2f} / ember {r[3]:.2f} ms")
        if a.rows:
            for r in sorted(rows, key=lambda r: r[4]):
                print(f"  {r[0]:60s} {r[1]:8.2f} {r[2]:8.2f} {r[3]:8.2f} {r[4]:5.2f}x")


if __name__ == "__main__":
    main()
