"""Which keys the server saw written, read from the server itself (specs/lifecycle.md
DEPTH-3): ``CLIENT TRACKING ON REDIRECT <id> BCAST PREFIX emq:{q}:`` on a connection of
the kit's own, redirected to a second one subscribed to ``__redis__:invalidate``. The
server then names every key written under a watched prefix, by any client and any
script, in the order it wrote them; a flush is named too (a null message).

Why tracking and not keyspace notifications: tracking is a property of the kit's own
connection and changes no server setting, so nothing is left to put back however the run
ends (a closed connection stops it); ``notify-keyspace-events`` is a server-wide setting.

The end of what one step wrote is certain without a write of our own: ``touched`` is
called once the step's reply came back, so the step ran; a ``PING`` on the subscriber is
then answered after every invalidation the server queued for it before, the step's
included (one client's replies keep their order)."""

from __future__ import annotations

from typing import Any

import redis

INVALIDATE = "__redis__:invalidate"


class Refused(Exception):
    """The server (or the user's ACL) does not let the kit track keys: a managed service
    without CLIENT, an ACL without CLIENT, SUBSCRIBE or ZMSCORE, a server without tracking."""


class Tracker:
    """The two connections of a tracking (see the module docstring), made from the
    pool of ``client`` (same address, user and TLS). ``Refused`` when the server
    refuses any part of it."""

    def __init__(self, client: Any) -> None:
        pool = client.connection_pool
        self.sub, self.ctl = pool.make_connection(), pool.make_connection()
        self.prefixes: list[str] = []
        try:
            self.sub.connect()
            self.ctl.connect()
            self.id = int(self._ask(self.sub, "CLIENT", "ID"))
            reply = self._ask(self.sub, "SUBSCRIBE", INVALIDATE)
            if not (isinstance(reply, list) and reply[0] == b"subscribe"):
                raise Refused(f"SUBSCRIBE {INVALIDATE} answered {reply!r:.80}")
            try:
                self.touched()  # the PING that ends a step's names is allowed too
            except redis.exceptions.ResponseError as exc:
                raise Refused(f"PING: {exc}") from None
            # The read by change's one command beyond a client's (emq_live.delta), tried
            # on a key of the grammar no queue has: refused now, not mid-run.
            self._ask(self.ctl, "ZMSCORE", "emq:{}:pending", "-")
            # Tracking tried at once, off again until a queue is watched (a refusal
            # then would come mid-run): ``emq:{`` heads every queue's keys.
            self._ask(self.ctl, "CLIENT", "TRACKING", "ON", "REDIRECT", self.id, "BCAST", "PREFIX", "emq:{")
            self._ask(self.ctl, "CLIENT", "TRACKING", "OFF")
        except BaseException:
            self.close()
            raise

    @staticmethod
    def _ask(conn: Any, *command: Any) -> Any:
        """One command's reply on ``conn``; the server's refusal is ``Refused``."""
        try:
            conn.send_command(*command)
            return conn.read_response()
        except redis.exceptions.ResponseError as exc:
            raise Refused(f"{command[0]} {command[1]}: {exc}") from None

    def watch(self, *prefixes: str) -> None:
        """Track every key under ``prefixes`` from now on (BCAST: whoever writes it), in
        one command. One under a prefix watched already is; the server refuses prefixes
        that overlap, so one over some watched restarts the tracking with it in their
        place (nothing of the kit's writes meanwhile: its calls are made one at a time)."""
        new: list[str] = []
        for prefix in prefixes:
            if not any(prefix.startswith(p) for p in (*self.prefixes, *new)):
                new = [p for p in new if not p.startswith(prefix)] + [prefix]
        if not new:
            return
        under = [p for p in self.prefixes if any(p.startswith(n) for n in new)]
        if under:
            self._ask(self.ctl, "CLIENT", "TRACKING", "OFF")
            self.prefixes = [p for p in self.prefixes if p not in under]
        heads = [*self.prefixes, *new] if under else new
        self._ask(self.ctl, "CLIENT", "TRACKING", "ON", "REDIRECT", self.id, "BCAST",
                  *(part for p in heads for part in ("PREFIX", p)))
        self.prefixes += new

    def stop(self) -> None:
        """Track nothing until the next ``watch`` (its names read first, ``touched``)."""
        if self.prefixes:
            self._ask(self.ctl, "CLIENT", "TRACKING", "OFF")
            self.prefixes = []

    def touched(self) -> set[str] | None:
        """Every watched key written since the last call, or ``None`` when the server
        flushed a database meanwhile (which keys went is not said)."""
        self.sub.send_command("PING")
        keys: set[str] | None = set()
        while True:
            message = self.sub.read_response()
            if message[0] == b"pong":
                return keys
            if message[0] == b"message" and message[1] == INVALIDATE.encode():
                if message[2] is None:
                    keys = None
                elif keys is not None:
                    keys.update(k.decode("utf-8", "surrogateescape") for k in message[2])

    def close(self) -> None:
        """Stop tracking: the server forgets it with the connections."""
        for conn in (self.ctl, self.sub):
            conn.disconnect()
