"""A clean install: the wheel ``python -m build`` makes installs, silently, into a fresh venv
outside the repository, and the demo runs from there; the editable build is silent too.

What is reused and why (to keep this under a minute): the wheel is installed with ``--no-deps``
into a venv created ``--without-pip`` (pip runs from this environment, ``pip --python``); only after
the install does a ``.pth`` file put this environment's site-packages (torch, triton, sympy, ...)
behind the venv's own, so the demo imports flashproof from the wheel and its dependencies from
here. ``python -m build --no-isolation`` builds with this environment's setuptools (the ``test``
extra requires setuptools>=77, the version ``[build-system]`` asks for): no download. The sources are
a copy of the tracked files in a temporary directory: the checkout is never written to.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: what an install's output must not contain (case-insensitive): setuptools' and pip's
#: deprecation and packaging warnings all carry one of these words
NOISE = ("warning", "deprecat", "!!")

pytestmark = pytest.mark.install


def _clean_env(**extra) -> dict:
    """No PYTHONPATH (the worktree must not be importable), no user pip configuration (a machine's
    extra indexes print their own warnings), no PYTHONDONTWRITEBYTECODE (with it, setuptools warns
    that it skips byte-compiling: the environment's warning, not the project's)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PIP_CONFIG_FILE", "PYTHONDONTWRITEBYTECODE")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", **extra)
    return env


def _source_copy(dest: Path) -> Path:
    """The files git tracks (what a clone has), copied to ``dest``; without git, the tree less
    the usual build and cache folders."""
    try:
        files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                               capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
            ".git", ".venv", ".artifacts", "build", "dist", "site", "*.egg-info", "__pycache__", ".hypothesis"))
        return dest
    for name in filter(None, files):
        if (ROOT / name).is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    got = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert got.returncode == 0, f"{cmd} failed ({got.returncode}):\n{got.stdout[-3000:]}\n{got.stderr[-3000:]}"
    return got


def _noise(text: str) -> list[str]:
    return [line for line in text.splitlines() if any(word in line.lower() for word in NOISE)]


@pytest.fixture(scope="module")
def src(tmp_path_factory) -> Path:
    return _source_copy(tmp_path_factory.mktemp("flashproof-src"))


def test_wheel_builds_installs_silently_and_runs_the_demo_outside_the_repo(src, tmp_path):
    pytest.importorskip("build")
    dist = tmp_path / "dist"
    built = _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)],
                 env=_clean_env(), cwd=tmp_path)
    assert not _noise(built.stdout + built.stderr), _noise(built.stdout + built.stderr)
    (wheel,) = dist.glob("flashproof-*.whl")

    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    installed = _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index",
                      str(wheel)], env=_clean_env(), cwd=tmp_path)
    out = installed.stdout + installed.stderr
    assert "Successfully installed flashproof" in out and not _noise(out), out

    # this environment's packages behind the venv's own: the dependencies, never flashproof
    # (a path in a .pth is not a site dir: this environment's editable-install hook is not run)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    ours = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    (site / "zz_flashproof_test_deps.pth").write_text("\n".join(ours) + "\n")

    run_dir = tmp_path / "elsewhere"
    run_dir.mkdir()
    # one process for every import check (each start imports torch: seconds of CPU), the demo's module among them
    where = _run([str(python), "-c", "import generator, generated, spec, spec.proofs, generator.templates as t, os; "
                  "import generator.demo as d; "
                  "print(generator.__file__, generated.__file__, spec.proofs.__file__, d.__file__); "
                  "print(sorted(os.listdir(t.__path__[0])))"], env=_clean_env(), cwd=run_dir).stdout
    paths, templates = where.splitlines()
    assert all(Path(p).is_relative_to(site) for p in paths.split()), paths
    assert "attention_fwd.py.jinja" in templates
    demo = _run([str(python), "-m", "generator.demo"], env=_clean_env(TRITON_INTERPRET="1"), cwd=run_dir)
    assert demo.stdout.strip().splitlines()[-1] == "PASS", demo.stdout


def test_the_editable_build_is_silent(src, tmp_path):
    """``pip install -e .`` runs setuptools' PEP 660 hook (``build_editable``): here through
    ``build``'s API with this environment's setuptools, its output captured. A flat layout left to
    setuptools' meta-path finder printed an "Editable installation" warning at every install."""
    build = pytest.importorskip("build")
    output = []

    def runner(cmd, cwd=None, extra_environ=None):
        got = subprocess.run(cmd, cwd=cwd, env={**_clean_env(), **(extra_environ or {})}, capture_output=True,
                             text=True)
        output.append(got.stdout + got.stderr)
        assert got.returncode == 0, output[-1][-4000:]

    wheel = build.ProjectBuilder(src, runner=runner).build("editable", tmp_path)
    assert Path(wheel).name.startswith("flashproof-") and output
    assert not _noise("\n".join(output)), _noise("\n".join(output))
