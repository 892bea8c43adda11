"""The contract's files (``specs/``, installed as the ``emq_specs`` package), read. The
lowest module of the model: ``spec`` interprets the transition table, ``branded_id``
reads its limits, and neither has to import the other to get it."""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any


@cache
def load() -> dict[str, Any]:
    """The parsed transition table."""
    return json.loads(resources.files("emq_specs").joinpath("transitions.json").read_text("utf-8"))


def text(name: str) -> str:
    """A file of the contract, by its path inside ``specs/``."""
    node = resources.files("emq_specs")
    for part in name.split("/"):
        node = node.joinpath(part)
    return node.read_text("utf-8")
