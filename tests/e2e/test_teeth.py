"""Teeth: `emq check --scripts DIR` must reject each hand-broken variant of our scripts
(tests/broken.py), one per failure class, and pass the real ones."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

from emq_kit import cli
from tests.broken import VARIANTS, Broken, broken_dir


def test_there_is_one_variant_per_failure_class() -> None:
    assert len({v.name for v in VARIANTS}) == len(VARIANTS) >= 12


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: v.name)
def test_check_rejects_broken_scripts(variant: Broken, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scripts = broken_dir(variant, tmp_path)
    code = cli.main(["check", "--scripts", str(scripts), "--profile", "ci", "--seed", "1", "--first",
                     "--traces", str(tmp_path / "traces")])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAIL, f"{variant.name} ({variant.why}) was not caught:\n{out}"
    assert "DIFFERS (counterexample)" in out and "diverges" in out
    assert len(list((tmp_path / "traces").glob("*.json"))) == 1, "the counterexample was not written as a trace"


def test_check_passes_the_real_scripts_from_a_copy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The copying itself changes nothing: an unedited copy conforms."""
    src = resources.files("emq_live").joinpath("lua")
    copy = tmp_path / "copy"
    shutil.copytree(str(src), copy)
    code = cli.main(["check", "--scripts", str(copy), "--profile", "dev", "--seed", "1"])
    assert code == cli.EXIT_OK, capsys.readouterr().out
