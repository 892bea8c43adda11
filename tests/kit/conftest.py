"""Fixtures shared by the kit's tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.kit.processes import NODE, emq


@pytest.fixture(scope="module")
def node_scripts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundle the Node port loads, written by ``emq scripts --out``."""
    assert (NODE / "node_modules" / "iovalkey").is_dir(), "run `npm ci --prefix ports/node` (scripts/test.sh does)"
    out = tmp_path_factory.mktemp("node") / "lua"
    done = emq("scripts", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out
