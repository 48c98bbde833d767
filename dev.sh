#!/usr/bin/env bash
# One entry point for a fresh machine with only Python 3 on it.
#   bash dev.sh demo   - set up, emit the kernels, run one on a small input, print its error vs the spec
#   bash dev.sh test   - set up, then run the whole test suite (what CI runs)
#   bash dev.sh docs   - set up, then build the documentation site offline into site/
set -euo pipefail
export NO_MKDOCS_2_WARNING=1
cd "$(dirname "$0")"
PY=.venv/bin/python

setup() {
  if [ ! -x "$PY" ]; then python3 -m venv .venv; fi
  "$PY" -m pip install -q --upgrade pip
  # The CPU wheel of torch first: a bare `torch` requirement could pull a multi-GB CUDA build.
  "$PY" -c "import torch" 2>/dev/null || "$PY" -m pip install -q "torch==2.13.0"
  "$PY" -m pip install -q -e ".[kernels,test,docs,bench,hf]"
}

case "${1:-}" in
  demo)
    setup
    "$PY" -m generator --br 64 --bc 64
    TRITON_INTERPRET=1 "$PY" -m generator.demo
    ;;
  test)
    setup
    bash docs/setup_katex.sh
    "$PY" -m playwright --version >/dev/null
    # pytest-xdist: one worker per core (2 on CI)
    TRITON_INTERPRET=1 "$PY" -m pytest -q -n auto
    ;;
  docs)
    setup
    bash docs/setup_katex.sh
    "$PY" -m mkdocs build --strict
    ;;
  *)
    echo "usage: bash dev.sh {demo|test|docs}" >&2
    exit 2
    ;;
esac
