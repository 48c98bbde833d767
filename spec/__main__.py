"""``python -m spec``: prove every claim and report.

Per claim, ``PROVED <id>: <statement>`` or ``FAILED <id>: <why>``, then an indented line with
its scope (symbolic or fixed sizes, ℤ / reals / int32 / fp32, exact or rounded), the accepted-range
assumptions it relies on (``spec.assumptions``), the hardware hypotheses it takes unproved
(``spec.assumptions.HYPOTHESES``) and its time; then a total. Exit status 1 if any
claim failed. ``--json`` prints a machine-readable list instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from spec.claims import REGISTRY


def scope_line(c, seconds: float) -> str:
    """The indented line under a claim: scope, assumptions, hardware hypotheses, time."""
    assumes = f"; assumes {', '.join(c.assumptions)}" if c.assumptions else ""
    hypotheses = f"; hardware hypotheses (not proved) {', '.join(c.hypotheses)}" if c.hypotheses else ""
    return f"    scope: {c.scope or 'not stated'}{assumes}{hypotheses}; {seconds:.2f} s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spec",
        description="Prove the spec's claims with SymPy (canonical zero or decided sign; "
                    "never sampling). Exit status 1 if any claim is not proved.")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {id, status, statement, detail, residuals}")
    parser.add_argument("--only", metavar="ID", action="append", choices=list(REGISTRY),
                        help="prove only this claim (repeatable)")
    args = parser.parse_args(argv)

    claims = [REGISTRY[cid] for cid in (args.only or REGISTRY)]
    start = time.perf_counter()
    results, seconds = [], {}
    for c in claims:
        t0 = time.perf_counter()
        results.append((c, c.prove()))
        seconds[c.id] = time.perf_counter() - t0
    elapsed = time.perf_counter() - start
    failed = [c.id for c, r in results if not r.proved]

    if args.json:
        print(json.dumps([{
            "id": c.id,
            "status": r.status,
            "statement": c.statement,
            "detail": r.detail,
            "terms": list(c.terms),
            "scope": c.scope,
            "assumptions": list(c.assumptions),
            "hypotheses": list(c.hypotheses),
            "seconds": round(seconds[c.id], 3),
            "residuals": [{"case": name, "residual": str(res)} for name, res in r.cases],
        } for c, r in results], indent=2, ensure_ascii=False))
    else:
        for c, r in results:
            print(f"PROVED {c.id}: {c.statement}" if r.proved else f"FAILED {c.id}: {r.detail}")
            print(scope_line(c, seconds[c.id]))
        print(f"{len(results) - len(failed)}/{len(results)} claims proved, "
              f"{len(failed)} failed ({elapsed:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
