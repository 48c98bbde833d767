"""``python -m spec``: prove every claim and report.

One line per claim, ``PROVED <id>: <statement>`` or ``FAILED <id>: <why>``, then a total.
Exit status 1 if any claim failed. ``--json`` prints a machine-readable list instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from spec.claims import REGISTRY


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
    results = [(c, c.prove()) for c in claims]
    elapsed = time.perf_counter() - start
    failed = [c.id for c, r in results if not r.proved]

    if args.json:
        print(json.dumps([{
            "id": c.id,
            "status": r.status,
            "statement": c.statement,
            "detail": r.detail,
            "terms": list(c.terms),
            "residuals": [{"case": name, "residual": str(res)} for name, res in r.cases],
        } for c, r in results], indent=2, ensure_ascii=False))
    else:
        for c, r in results:
            print(f"PROVED {c.id}: {c.statement}" if r.proved else f"FAILED {c.id}: {r.detail}")
        print(f"{len(results) - len(failed)}/{len(results)} claims proved, "
              f"{len(failed)} failed ({elapsed:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
