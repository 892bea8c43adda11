"""A campaign's plan as a value (specs/campaign.md CMP-1, CMP-2): its targets, seeds,
profiles and clock modes, read from a TOML file checked against
``specs/schemas/plan.json`` and/or from flags, and expanded into its runs, each a
``CheckOptions`` made (and so checked, BD-1) before anything runs."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from emq_kit import bounds
from emq_kit.check.options import CheckOptions
from emq_kit.check.tally import SHRINK_STEPS
from emq_kit.errors import BadArgument
from emq_kit.inputs import read_text
from emq_model import spec

FAKEREDIS = "fakeredis"
"""The name of the embedded fakeredis target, and how ``--target`` gives it."""


@dataclass(frozen=True)
class PlanTarget:
    """One target of a plan: where its runs go (neither ``url`` nor ``driver``: the
    embedded fakeredis)."""

    name: str
    url: str | None = None
    driver: str | None = None
    scripts: str | None = None
    layout: str = "echomq"


@dataclass(frozen=True)
class PlannedRun:
    """One run of a plan: its id (``target/profile/clock/seed``), its target's name and
    the options of its check (``traces`` is set on the worker)."""

    id: str
    target: str
    options: CheckOptions

    @property
    def file(self) -> str:
        """Where its report goes under the campaign's directory."""
        o = self.options
        return f"runs/{self.target}/{o.profile}-{o.clock}-{o.seed}.json"


@dataclass(frozen=True)
class Plan:
    """Targets x seeds x profiles x clocks; ``examples``, ``steps``, ``shrink_steps``
    and ``hostile`` apply to every run (None: the profile's, the check's default)."""

    targets: tuple[PlanTarget, ...]
    seeds: tuple[int, ...] = (0,)
    profiles: tuple[str, ...] = ("dev",)
    clocks: tuple[str, ...] = ("virtual",)
    examples: int | None = None
    steps: int | None = None
    shrink_steps: int | None = None
    hostile: str = "both"

    def runs(self) -> list[PlannedRun]:
        """Every run, each one's options checked (``BadArgument`` naming the run), at most
        ``bounds.RUNS`` of them (CMP-2)."""
        count = len(self.targets) * len(self.seeds) * len(self.profiles) * len(self.clocks)
        why = bounds.RUNS.refusal(count)
        if why is not None:
            raise BadArgument(f"the plan has {count:,} runs: {why}")
        pattern = name_pattern()
        for t in self.targets:  # a name is a directory of the campaign's output: the plan file's rule for flags too
            if not re.fullmatch(pattern, t.name):
                raise BadArgument(f"the target name {t.name!r} does not match {pattern} (a name is a directory "
                                  "of the campaign's output)")
        for what, values in (("target", [t.name for t in self.targets]), ("seed", self.seeds),
                             ("profile", self.profiles), ("clock", self.clocks)):
            twice = [v for n, v in enumerate(values) if v in values[:n]]
            if twice:  # one run id, one report file: a value listed twice is no second run
                raise BadArgument(f"the plan lists the {what} {twice[0]!r} twice: each run needs an id of its own")
        out = []
        for t in self.targets:
            for profile in self.profiles:
                for clock in self.clocks:
                    for seed in self.seeds:
                        rid = f"{t.name}/{profile}/{clock}/{seed}"
                        shrink = SHRINK_STEPS if self.shrink_steps is None else self.shrink_steps
                        try:
                            options = CheckOptions(url=t.url, driver=t.driver, scripts=t.scripts, layout=t.layout,
                                                   profile=profile, clock=clock, seed=seed, examples=self.examples,
                                                   steps=self.steps, hostile=self.hostile, shrink_steps=shrink)
                        except BadArgument as exc:
                            raise BadArgument(f"run {rid}: {exc}") from None
                        out.append(PlannedRun(rid, t.name, options))
        return out


def target_of(text: str) -> PlanTarget:
    """``--target``'s ``[NAME=]SPEC``: ``fakeredis``, a server's URL or ``driver:CMD``;
    the name is given or made from the spec."""
    name, _, spec_text = text.partition("=") if "=" in text.split(":", 1)[0] else ("", "", text)
    if spec_text == FAKEREDIS:
        return PlanTarget(name or FAKEREDIS)
    if spec_text.startswith("driver:"):
        command = spec_text[len("driver:"):].strip()
        if not command:
            raise BadArgument(f"--target {text!r}: driver: needs the driver's command")
        return PlanTarget(name or "driver", driver=command)
    if "://" in spec_text:
        from emq_live.urls import redact

        return PlanTarget(name or _slug(redact(spec_text).split("://", 1)[1]), url=spec_text)
    raise BadArgument(f"--target {text!r}: give fakeredis, a server's URL (redis://...) or driver:CMD, "
                      "optionally as NAME=...")


def _slug(text: str) -> str:
    """A target name made of a URL's host part: the characters a name may hold."""
    kept = "".join(c if c.isalnum() or c in "_.-" else "-" for c in text).strip("-.") or "server"
    return kept[:64]


def name_pattern() -> str:
    """The pattern a target's name matches (``specs/schemas/plan.json``)."""
    return str(schema()["properties"]["targets"]["items"]["properties"]["name"]["pattern"])


def schema() -> dict[str, Any]:
    """``specs/schemas/plan.json``, parsed."""
    return dict(json.loads(spec.text("schemas/plan.json")))


def load(path: str | Path) -> dict[str, Any]:
    """The plan file at ``path``, parsed and checked against the schema: the first
    problem is one ``BadArgument`` naming the file and where in it (CMP-1)."""
    import jsonschema

    try:
        data = tomllib.loads(read_text(path, holds="a plan holds"))
    except OSError as exc:
        raise BadArgument(f"cannot read the plan {path}: {exc.strerror or exc}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadArgument(f"the plan {path} is not TOML: {exc}") from None
    errors = sorted(jsonschema.Draft202012Validator(schema()).iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        where = "/".join(str(p) for p in errors[0].absolute_path) or "(top)"
        raise BadArgument(f"the plan {path} at {where}: {errors[0].message}")
    return data


def plan_of(data: dict[str, Any], targets: Iterable[PlanTarget] = (), **given: Any) -> Plan:
    """A plan from a plan file's ``data`` (may be empty), with the flags ``targets`` and
    ``given`` (None: not given) replacing the file's values."""
    from emq_live.urls import UrlError, check_url

    chosen = tuple(targets) or tuple(PlanTarget(**t) for t in data.get("targets", ()))
    if not chosen:
        chosen = (PlanTarget(FAKEREDIS),)
    for t in chosen:
        try:
            if t.url is not None:
                check_url(t.url)  # a URL the client cannot read: refused before any run or output (CMP-1)
        except UrlError as exc:
            raise BadArgument(f"target {t.name}: {exc}") from None
    fields: dict[str, Any] = {}
    for name in ("seeds", "profiles", "clocks"):
        value = given.get(name) or data.get(name)
        if value:
            fields[name] = tuple(value)
    for name in ("examples", "steps", "shrink_steps", "hostile"):
        value = given.get(name) if given.get(name) is not None else data.get(name)
        if value is not None:
            fields[name] = value
    return Plan(chosen, **fields)
