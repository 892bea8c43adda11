"""A trace as a standalone pytest regression test (``emq replay --pytest``)."""

from __future__ import annotations

import json

from emq_kit.trace.format import Trace

_PYTEST = '''"""Regression test written by `emq replay --pytest` from {source}.

It replays the trace on the model and on the target (the trace's server, or the server
in $EMQ_URL; the script directory in $EMQ_SCRIPTS, the driver command in $EMQ_DRIVER: a
trace is data, so the ones it names run only when given) and fails while the target
still diverges: step {step}, {rule}. Keep it as a guard once the fix has landed.
"""

import json
import os

from emq_kit.trace.replay import explain, replay, step_table, target_for
from emq_kit.trace.format import Trace

TRACE = Trace.from_json(json.loads(r"""
{blob}
"""))


def test_trace_conforms() -> None:
    target, clock = target_for(TRACE.header, url=os.environ.get("EMQ_URL"), scripts=os.environ.get("EMQ_SCRIPTS"),
                               driver=os.environ.get("EMQ_DRIVER"))
    try:
        result = replay(TRACE.steps, target, clock)
    finally:
        target.close()
        if clock is not None:
            clock.close()
    assert result.conforms, step_table(result) + "\\n" + explain(result)
'''


def pytest_source(trace: Trace, source: str) -> str:
    """A standalone regression test: it fails while the target still diverges."""
    d = trace.divergence or {}
    blob = json.dumps(trace.to_json(), ensure_ascii=True, indent=1)
    return _PYTEST.format(source=source, step=d.get("step"), rule=d.get("rule"), blob=blob)
