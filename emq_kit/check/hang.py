"""A script that never returns (specs/lifecycle.md CC-9): the bound a call may run, the
stop of a server's script past it, and the fault that records it as the step's answer.

On the embedded fakeredis the bound is ``emq_live.embedded.CPU_SECONDS`` of CPU, kept by
the Lua runtime itself (its error, ``HANG``, is read here). On a server a call is given
``SERVER_SECONDS`` on its socket; past them the kit sends ``SCRIPT KILL`` over a
connection of its own: a script was running (and is stopped: the server answers again),
or none was (a slow or lost server: not a hang), or one that has written cannot be
stopped (``UNKILLABLE``: the hang is the verdict, and the server must be restarted).
"""

from __future__ import annotations

import time
from typing import Any

from emq_kit.errors import ScriptHang, ServerUnreachable, Unkillable
from emq_live import embedded
from emq_live.urls import redact

RULE = "CC-9"
"""The rule a hang diverges under: every script returns."""
SERVER_SECONDS = 10.0
"""Seconds one command may run on a server before the kit stops it as a script that
never returns (a server answers other clients ``BUSY`` after its own 5 s, when ``SCRIPT
KILL`` is first heard; the kit's largest call takes well under a second). 0: no bound
(a selftest child, whose judge stops a hung script itself)."""


DRAIN_SECONDS = 300.0
"""How long the kit waits for a server to answer again after it stopped a hung script:
a window's pipeline may hold more calls that hang in turn (each heard after the server's
own 5 s), every one of which it stops."""


def hang_of(exc: BaseException) -> ScriptHang | None:
    """The hang an error reply of the embedded fakeredis reports (its ``HANG`` error), or
    None."""
    text = str(exc)
    if embedded.HANG not in text:
        return None
    return ScriptHang(f"hang: {text[text.index(embedded.HANG) + len(embedded.HANG):].strip().splitlines()[0]}")


KILLED = "Script killed by user with SCRIPT KILL"
"""The error reply of a script ``SCRIPT KILL`` stopped (Valkey, Redis)."""


def killed(reply: Any) -> bool:
    """Whether ``reply`` (an answer or the exception of an error reply) is that of a
    script ``SCRIPT KILL`` stopped."""
    return isinstance(reply, Exception) and KILLED in str(reply)


def is_hang(answer: Any) -> bool:
    """Whether a target's outcome (a ``Crash``'s exception or the exception itself) is a hang."""
    return isinstance(getattr(answer, "exc", answer), ScriptHang)


def stopped(url: str, what: str) -> ScriptHang | None:
    """A call to ``url`` ran past ``SERVER_SECONDS``: the hang once ``SCRIPT KILL``
    stopped its script (``stuck`` when the script cannot be stopped), or None when no
    script was running (the server is slow or gone, not hung)."""
    try:
        if not stop_script(url):
            return None
    except Unkillable:
        return ScriptHang(f"hang: {what} did not return within {SERVER_SECONDS:g} s, and SCRIPT KILL cannot "
                          f"stop it (it has written): {redact(url)} answers nothing else until restarted",
                          stuck=True)
    return ScriptHang(f"hang: {what} did not return within {SERVER_SECONDS:g} s; stopped with SCRIPT KILL")


def stop_script(url: str) -> bool:
    """``SCRIPT KILL`` on every primary of ``url``: whether a script was running (and is
    now stopped). A script that has written cannot be killed (``UNKILLABLE``): the server
    is lost to the run, an ``Unkillable``."""
    import redis
    from redis.exceptions import RedisClusterException

    from emq_live.client import _client
    from emq_live.urls import plain

    seed, cluster = plain(url)
    stopped = False
    try:
        if cluster:  # the seed node first: busy, it would answer the cluster client's CLUSTER SLOTS BUSY
            first = _client(seed)
            try:
                stopped = _kill_on([first], url)
            finally:
                first.close()
        client = _client(url)
        try:
            nodes = [client.get_redis_connection(n) for n in client.get_primaries()] if cluster else [client]
            stopped = _kill_on(nodes, url) or stopped
        finally:
            client.close()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, RedisClusterException) as exc:
        raise ServerUnreachable(f"lost the server {redact(url)}: {exc}") from None
    return stopped


def _kill_on(nodes: list[Any], url: str) -> bool:
    """``SCRIPT KILL`` on each of ``nodes`` (of ``url``), each waited for until it answers
    again: whether a script was running on any."""
    import redis

    stopped = False
    for node in nodes:
        try:
            node.execute_command("SCRIPT", "KILL")
            stopped = True
            _answers(node)
        except redis.exceptions.ResponseError as exc:
            if str(exc).startswith("UNKILLABLE"):
                raise Unkillable(f"a script is still running on {redact(url)} and has written: "
                                 "SCRIPT KILL cannot stop it (restart the server)") from None
            # NOTBUSY: nothing was running
    return stopped


def timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a call's socket timeout, or what a cluster client raised in its
    place: after a timeout it asks for the slots again and resends a pipeline's call, and
    the node still running the hung script answers either ``BUSY``."""
    import redis

    while exc is not None:
        if isinstance(exc, redis.exceptions.TimeoutError) or (
                isinstance(exc, redis.exceptions.ResponseError) and str(exc).startswith("BUSY")):
            return True
        exc = exc.__context__  # type: ignore[assignment]
    return False


def _answers(node: Any) -> None:
    """Wait until ``node`` answers again after a ``SCRIPT KILL``: the server stops the
    script at its next check, and the hung call's connection may have more script calls
    in the server's buffer (a window's pipeline), each of which runs, hangs and is
    answered ``BUSY`` in turn: each is killed as it comes (bounded by ``DRAIN_SECONDS``)."""
    import redis

    deadline, answered = time.monotonic() + DRAIN_SECONDS, 0
    while True:
        try:
            node.ping()
            answered += 1
            if answered == 2:  # twice, apart: the rest of a pipeline the server had not read yet ran meanwhile
                return
            time.sleep(0.2)
        except redis.exceptions.ResponseError as exc:
            answered = 0
            if not str(exc).startswith("BUSY") or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
            try:
                node.execute_command("SCRIPT", "KILL")
            except redis.exceptions.ResponseError as again:
                if str(again).startswith("UNKILLABLE"):
                    raise
