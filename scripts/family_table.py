#!/usr/bin/env python3
"""The family sweep's standing over several report JSONs (issue 36's bars): per mode and dtype,
the models where eager, Inductor and ember.compile all ran (a model in several files: the last
file's run), the ember/Inductor speed-ratio geomean, the models below 0.9x of Inductor and below
eager, compile-time medians, and peak memory over eager's.

    python3 scripts/family_table.py docs/results/2026-12-06_family_bf16_*.json [--rows] \
        [--svg chart.svg]

--svg writes the chart issue 36 keeps with the table: one bar per model, its ember/Inductor
speed ratio on a log scale, sorted, with lines at 1.0 and at the 0.9 bar (one chart per mode and
dtype; the file name gets `_<mode>_<dtype>` when there are several).
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


def svg_chart(title: str, rows: list[tuple[str, float]]) -> str:
    """A sorted bar chart of (model, ratio) on a log2 axis, as standalone SVG text."""
    rows = sorted(rows, key=lambda r: r[1])
    bar, gap, left, top, height = 6, 1, 60, 40, 320
    width = left + len(rows) * (bar + gap) + 20
    lo = min(0.5, min(r for _, r in rows))
    hi = max(2.0, max(r for _, r in rows))

    def y(v: float) -> float:  # log2 scale, hi at the top
        return top + height * (math.log2(hi) - math.log2(v)) / (math.log2(hi) - math.log2(lo))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{top + height + 40}" '
           f'font-family="sans-serif" font-size="11">',
           f'<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{left}" y="18" font-size="13">{title}</text>']
    tick = 0.25
    while tick <= hi * 1.01:
        if tick >= lo * 0.99:
            out.append(f'<line x1="{left - 4}" x2="{width - 20}" y1="{y(tick):.1f}" '
                       f'y2="{y(tick):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                       f'{tick:g}x</text>')
        tick *= 2
    base = y(1.0)
    for i, (model, r) in enumerate(rows):
        x = left + i * (bar + gap)
        colour = "#c0392b" if r < 0.9 else "#e67e22" if r < 1.0 else "#2e86c1"
        y0, y1 = sorted((base, y(r)))
        out.append(f'<rect x="{x}" y="{y0:.1f}" width="{bar}" height="{max(y1 - y0, 0.5):.1f}" '
                   f'fill="{colour}"><title>{model}: {r:.2f}x</title></rect>')
    for v, dash in ((1.0, ""), (0.9, ' stroke-dasharray="4 3"')):
        out.append(f'<line x1="{left}" x2="{width - 20}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
                   f'stroke="black"{dash}/>')
    out.append(f'<text x="{left}" y="{top + height + 25}">{len(rows)} models, sorted; '
               f'Inductor time over ember.compile time (above 1x: ember faster); dashed: '
               f'0.9x</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rows", action="store_true", help="print every model's row")
    ap.add_argument("--svg", default=None, help="write the sorted ratio chart here")
    a = ap.parse_args()
    # In the order given (a pattern's matches sorted): a model's run is the last file's, so a
    # rerun listed after the sweep replaces the sweep's row.
    paths = list(dict.fromkeys(p for pattern in a.files for p in sorted(glob.glob(pattern))))
    runs = load_runs(paths)
    keys = sorted({k[:2] for k in runs})
    for key in keys:
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
        if a.svg:
            path = a.svg if len(keys) == 1 else a.svg.replace(".svg", f"_{key[0]}_{key[1]}.svg")
            with open(path, "w") as f:
                f.write(svg_chart(f"ember.compile against Inductor, {key[0]} {key[1]}: "
                                  f"geomean {geo:.2f}x over {len(rows)} models",
                                  [(r[0], r[4]) for r in rows]))
        if a.rows:
            for r in sorted(rows, key=lambda r: r[4]):
                print(f"  {r[0]:60s} {r[1]:8.2f} {r[2]:8.2f} {r[3]:8.2f} {r[4]:5.2f}x")


if __name__ == "__main__":
    main()
