"""``python -m generator``: argument checks, proofs before printing, atomic writes, --check."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from generator import __main__ as cli
from generator import manifest, render
from generator.variants import BlockConfig
from spec import claims

ROOT = Path(__file__).resolve().parent.parent
GENERATED = ROOT / "generated"


def run_cli(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "generator", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_help_names_options_and_examples():
    r = run_cli("--help")
    assert r.returncode == 0
    for word in ("--br", "--bc", "--mask", "--num-warps", "--num-stages", "--out", "--check", "examples:"):
        assert word in r.stdout


@pytest.mark.parametrize("args", [("--br", "48"), ("--bc", "512"), ("--br", "8"), ("--bc", "sixty-four")])
def test_bad_block_exits_2_and_writes_nothing(tmp_path, args):
    out = tmp_path / "out"
    r = run_cli(*args, "--out", str(out))
    assert r.returncode == 2
    assert "16, 32, 64, 128, 256" in r.stderr
    assert not out.exists()


def test_block_config_validates_itself():
    with pytest.raises(ValueError, match="16, 32, 64, 128, 256"):
        BlockConfig(64, 24)
    with pytest.raises(ValueError, match="--mask takes"):
        BlockConfig(64, 64, masks=("diagonal",))
    assert BlockConfig(64, 64, masks=("dense", "causal")).masks == ("causal", "dense")


def test_failed_claim_refuses_to_emit(tmp_path, monkeypatch, capsys):
    failed = claims.Result("exp2_rewrite", False, "residual x - y")
    monkeypatch.setattr(claims, "prove_all", lambda: [failed])
    assert cli.main(["--out", str(tmp_path / "out")]) == 1
    assert "FAILED exp2_rewrite" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_render_failure_writes_nothing(tmp_path, monkeypatch):
    def broken(variant):
        raise RuntimeError("template error")
    monkeypatch.setattr(render, "render_variant", broken)
    with pytest.raises(RuntimeError):
        manifest.emit(BlockConfig(64, 64), tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_check_passes_on_checked_in_generated():
    r = run_cli("--check")
    assert r.returncode == 0, r.stdout + r.stderr


def test_check_reports_edited_and_stale_files(tmp_path):
    out = tmp_path / "generated"
    shutil.copytree(GENERATED, out, ignore=shutil.ignore_patterns("__pycache__"))
    assert manifest.check(out) == []

    # a hand edit: the file's hash no longer matches the manifest
    fwd = out / "attention_fwd_br64_bc64.py"
    fwd.write_text(fwd.read_text().replace("alpha = tl.exp2(m_i - m_safe)", "alpha = tl.exp2(m_safe - m_i)"))
    r = run_cli("--check", "--out", str(out))
    assert r.returncode == 1
    assert "edited   attention_fwd_br64_bc64.py" in r.stdout

    # stale: as emitted (hash matches) but emitted from another spec
    data = json.loads((out / "MANIFEST.json").read_text())
    entry = data["configs"]["br64_bc64"]
    entry["files"]["attention_fwd_br64_bc64.py"] = manifest.sha256(fwd.read_text())
    entry["spec_hash"] = "0" * 64
    (out / "MANIFEST.json").write_text(manifest.dumps(data))
    problems = manifest.check(out)
    assert [(p.file, p.status) for p in problems] == [("attention_fwd_br64_bc64.py", "stale")]
    assert "the spec changed" in problems[0].why and "python -m generator --br 64 --bc 64" in problems[0].why

    (out / "softmax_br16_bc32.py").unlink()
    assert ("softmax_br16_bc32.py", "missing") in [(p.file, p.status) for p in manifest.check(out)]


def test_regeneration_is_byte_identical(tmp_path, proved, monkeypatch, capsys):
    """Emitting every checked-in config into an empty dir reproduces generated/ byte for byte.
    The default config goes through the CLI's ``main`` (its proof gate fed the session's ``prove_all()``
    results, conftest's ``proved``, rather than a third proof run in a subprocess; the gate's refusal is
    test_failed_claim_refuses_to_emit's, the entry point the --help/--check runs'), the others through emit."""
    out = tmp_path / "generated"
    monkeypatch.setattr(claims, "prove_all", lambda: list(proved.values()))
    configs = manifest.configs_of(manifest.load(GENERATED))
    for config in configs:
        if config == BlockConfig():
            assert cli.main(["--out", str(out)]) == 0, capsys.readouterr().err
        else:
            manifest.emit(config, out)
    emitted = sorted(p.name for p in out.iterdir())
    checked_in = sorted(p.name for p in GENERATED.iterdir() if p.name != "__pycache__")
    assert emitted == checked_in
    for name in emitted:
        assert (out / name).read_bytes() == (GENERATED / name).read_bytes(), name


def test_emitting_one_config_keeps_the_others(tmp_path):
    """Configs are keyed by block and mask set: a 64x64 causal-only config sits beside the full one."""
    manifest.emit(BlockConfig(16, 32), tmp_path)
    manifest.emit(BlockConfig(64, 64, num_warps=8), tmp_path)
    manifest.emit(BlockConfig(64, 64, masks=("causal",)), tmp_path)  # another mask set: a second entry
    data = manifest.load(tmp_path)
    assert sorted(data["configs"]) == ["br16_bc32", "br64_bc64", "br64_bc64_causal"]
    assert data["configs"]["br64_bc64_causal"]["command"] == "python -m generator --br 64 --bc 64 --mask causal"
    files = sorted(p.name for p in tmp_path.iterdir())
    assert {"attention_fwd_causal_br64_bc64.py", "attention_fwd_br64_bc64.py", "softmax_causal_br64_bc64.py",
            "softmax_br64_bc64.py"} <= set(files)
    index = (tmp_path / "__init__.py").read_text()
    assert "(16, 32):" in index and "'fwd': 'attention_fwd_br64_bc64'" in index  # the full mask set serves
    assert manifest.check(tmp_path) == []
    manifest.emit(BlockConfig(64, 64, num_warps=4), tmp_path)  # same block and masks: replaces its own entry
    assert sorted(manifest.load(tmp_path)["configs"]) == ["br16_bc32", "br64_bc64", "br64_bc64_causal"]


def test_every_file_is_stamped():
    data = manifest.load(GENERATED)
    for entry in data["configs"].values():
        for name in entry["files"]:
            first = (GENERATED / name).read_text().splitlines()[0]
            assert first == f"# Code generated by `{entry['command']}` from spec {entry['spec_hash'][:12]}. DO NOT EDIT."
    assert (GENERATED / "__init__.py").read_text().startswith("# Code generated by `python -m generator`")


def test_regenerate_re_emits_every_config_on_disk(tmp_path, monkeypatch, capsys):
    """``--regenerate`` re-emits each config the manifest lists with its own block, masks and
    settings: a copy of generated/ with one file edited comes back byte for byte (the proofs are
    stubbed here; the CLI runs them once)."""
    out = tmp_path / "generated"
    shutil.copytree(GENERATED, out, ignore=shutil.ignore_patterns("__pycache__"))
    (out / "softmax_br16_bc32.py").write_text("# edited\n")
    monkeypatch.setattr(claims, "prove_all", lambda: [])
    assert cli.main(["--regenerate", "--out", str(out)]) == 0
    assert manifest.check(out) == []
    for path in GENERATED.glob("*.py"):
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name
    empty = tmp_path / "empty"
    assert cli.main(["--regenerate", "--out", str(empty)]) == 2
    assert "lists no config" in capsys.readouterr().err
