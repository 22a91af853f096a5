"""Runs ember's OpInfo sweep outside pytest and prints a table per (op, dtype) and the pass rate.

    python tests/python/opinfo/sweep_report.py            # the bounded CI subset
    python tests/python/opinfo/sweep_report.py --full     # every sample of every selected op

See opinfo_sweep_lib.py for what is run and how samples are classified; the results are recorded
in docs/design/opinfo_sweep.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import ember  # noqa: E402,F401
import opinfo_sweep_lib as lib  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="all samples of all selected ops (EMBER_OPINFO_FULL=1)")
    ap.add_argument("--samples", type=int, default=None,
                    help="samples per (op, dtype) in the bounded run (default: EMBER_OPINFO_SAMPLES or 3)")
    ap.add_argument("--ops", default=None, help="comma-separated OpInfo names[.variant] to run instead")
    ap.add_argument("--max-message", type=int, default=400, help="truncate failure messages (0: no limit)")
    args = ap.parse_args(argv)

    if args.full:
        os.environ["EMBER_OPINFO_FULL"] = "1"
    limit = None if args.full else (args.samples or lib.samples_per_case())
    cases = lib.cases(full=args.full)
    if args.ops:
        wanted = set(args.ops.split(","))
        cases = [c for c in cases if c[0] in wanted or f"{c[0]}.{c[1]}" in wanted]

    start = time.perf_counter()
    rows, failures, total = [], [], {k: 0 for k in lib.KINDS}
    for name, variant, dtype in cases:
        t0 = time.perf_counter()
        results = lib.run_case(name, variant, dtype, limit)
        dt = time.perf_counter() - t0
        counts = lib.tally(results)
        for k in lib.KINDS:
            total[k] += counts[k]
        cid = lib.case_id(name, variant, dtype)
        rows.append((cid, len(results), counts, dt))
        for r in results:
            if r.kind in ("fail", "fallback"):
                failures.append((cid, r))
        print(f"  {cid:<40} {len(results):>3} samples {dt:6.1f} s  "
              + " ".join(f"{k}={counts[k]}" for k in lib.KINDS if counts[k]), file=sys.stderr, flush=True)
    elapsed = time.perf_counter() - start

    mode = "full" if args.full else f"bounded (<= {limit} samples per op and dtype, CI op list)"
    print(f"ember OpInfo sweep, {mode}; torch {torch.__version__}; {len(cases)} (op, dtype) cases")
    print()
    header = ("op", "dtype", "samples", "pass", "fail", "fallback", "not-fused", "skip")
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(" --- " for _ in header) + "|")
    for cid, n, c, _ in rows:
        op, dt = cid.rsplit("-", 1)
        print(f"| {op} | {dt} | {n} | {c['pass']} | {c['fail']} | {c['fallback']} | {c['not_fused']} | {c['skip']} |")
    n_all = sum(total.values())
    ok_rate, fused_rate = lib.rates(total)
    print()
    print(f"samples: {n_all}; pass {total['pass']}, fail {total['fail']}, fallback {total['fallback']}, "
          f"not-fused {total['not_fused']}, skip (eager raised) {total['skip']}")
    print(f"correctness pass rate (pass + not-fused + fallback, of non-skipped): {ok_rate:.1%}")
    print(f"fused rate (ran a generated kernel, of non-skipped): {fused_rate:.1%}")
    print(f"elapsed: {elapsed:.1f} s")
    if failures:
        print()
        print("failures and fallbacks:")
        for cid, r in failures:
            msg = " ".join(r.message.split())
            if args.max_message and len(msg) > args.max_message:
                msg = msg[: args.max_message] + " ..."
            print(f"- {cid} sample {r.index} {r.desc}: {r.kind}: {msg}")
    return 1 if total["fail"] else 0


if __name__ == "__main__":
    sys.exit(main())
