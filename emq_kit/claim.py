"""A run's claim on a server: the names it may write, and nothing left behind
(specs/ownership.md OWN-1..8).

``Claim(url, logical, ...)`` is entered before a command writes anything to a server:

1. it removes the leftovers of dead runs (``clean``: a run killed with SIGKILL), saying
   in one line what it removed;
2. it gives every logical queue name the run may send a name of the run's own
   (``emq_kit.check.names.Names``: the run's suffix; a one-byte name no user key and no
   other run holds; the user's ``--queue`` names);
3. it refuses (``Occupied``: one line naming the keys and ``--wipe``) when the server
   already holds keys of any of them, unless ``wipe`` allows deleting them;
4. it writes the run's record ``{emq}:run:<suffix>`` (its names, its process, whether
   ``{emq}:version`` was absent) and its lease ``{emq}:run:<suffix>:live`` (a key with a
   TTL a thread renews while the run lives). Both are in the hash slot of ``{emq}``, as
   ``{emq}:version`` is, so a cluster holds them on one node.

Leaving it, however the run ends (success, difference, Ctrl-C, an exception of the
kit), deletes every key of the run's names, the ``{emq}:version`` the run wrote on a
server that had none, and the record. A run killed with SIGKILL leaves its record; its
lease runs out (or, on the same machine, its process is seen gone), and ``clean`` — run
by ``emq clean --url U`` and at the start of every claim — removes what it names. A live
run's record and keys are never touched, nor any key of a name no run recorded.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, ContextManager, Iterable, Iterator, Mapping

from emq_kit.check.names import Names, new_suffix, one_byte_needed
from emq_kit.errors import Occupied, TargetUnavailable
from emq_kit.forks import interrupts_deferred
from emq_model import keyspace

RUN = "{emq}:run:"
"""A run's record is ``{emq}:run:<suffix>`` (JSON); its lease the same with ``:live``."""
LIVE = ":live"
LEASE_MS = 30_000
"""A lease's TTL: a run not seen renewing it for this long is dead (another machine's)."""
BEAT = 5.0
"""Seconds between two renewals of the lease."""
ONE_BYTE = tuple(chr(b) for b in range(0x21, 0x7F) if chr(b) not in "{}*?[]\\")
"""A run's one-byte name is one of these: a name KS-3 accepts that is no glob's special
character. It is the run's one name without the suffix, so a target whose reset forgets to
escape its SCAN glob would, given ``*``, delete every queue on the server (OWN-2)."""
SHOWN = 3
"""Keys named in a refusal (the rest are counted)."""
SPREAD_TRIES = 500
"""Suffixes drawn at most to put the machine's queues on distinct primaries of a cluster
(about one in eleven does on three primaries: the chance none of 500 does is 1e-20)."""


def _text(value: Any) -> str:
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)


def host() -> str:
    """This machine and pid namespace: a record made here can be judged by its pid."""
    try:
        boot = open("/proc/sys/kernel/random/boot_id").read().strip()
        space = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""  # no way to tell a pid's liveness: the lease alone decides
    return f"{socket.gethostname()}/{boot}/{space}"


def started(pid: int) -> str | None:
    """When process ``pid`` started (clock ticks since boot), or None if there is none:
    a pid reused by another process has another start."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


@dataclass
class Removed:
    """What ``clean`` removed: each dead run's record, and how many keys in all."""

    runs: list[dict[str, Any]] = field(default_factory=list)
    keys: int = 0
    live: int = 0  # live runs seen and left alone

    def __bool__(self) -> bool:
        return bool(self.runs)

    def line(self, where: str) -> str:
        """One line: what was removed from ``where``."""
        if not self.runs:
            return f"no leftovers of dead runs on {where} ({self.live} live run{'s' if self.live != 1 else ''})"
        runs = "; ".join(f"{r.get('command', '?')} pid {r.get('pid', '?')}, suffix {r.get('id', '?')}"
                         for r in self.runs)
        return (f"removed the leftovers of {len(self.runs)} dead run{'s' if len(self.runs) != 1 else ''} on "
                f"{where}: {self.keys} key{'s' if self.keys != 1 else ''} ({runs})")


def _delete(client: Any, keys: Iterable[bytes]) -> int:
    """Delete ``keys`` one command each, in pipelines (a cluster routes each to its node)."""
    count, pipe = 0, client.pipeline(transaction=False)
    for key in keys:
        pipe.delete(key)
        count += 1
        if count % 1000 == 0:
            pipe.execute()
    pipe.execute()
    return count


def _drop_fence(client: Any) -> int:
    """Delete the ``{emq}:version`` a run wrote, if it is there (1, else 0). Read first:
    an administrator's ACL makes the fence read-only (specs/acl.json), and a DEL of it,
    there or not, is refused — which ended a release before the run's record went."""
    return int(client.delete(keyspace.VERSION_KEY)) if client.exists(keyspace.VERSION_KEY) else 0


def _records(client: Any) -> Iterable[tuple[bytes, dict[str, Any]]]:
    """Every run record on the server (one that cannot be read is not ours to judge)."""
    for key in client.scan_iter(match=RUN + "*", count=1000):
        key = key if isinstance(key, bytes) else str(key).encode()
        if key.endswith(LIVE.encode()):
            continue
        raw = client.get(key)
        if raw is None:
            continue
        try:
            doc = json.loads(raw)
            Names.from_json(doc["names"])
        except (ValueError, TypeError, KeyError):
            continue
        pid = doc.get("pid", 0)
        if not isinstance(pid, int) or isinstance(pid, bool):  # no process this kit could have judged
            continue
        yield key, doc


def alive(client: Any, key: bytes, doc: Mapping[str, Any]) -> bool:
    """Whether the run of record ``doc`` lives: its lease is there and, when it ran on
    this machine, its process too."""
    if not client.exists(key + LIVE.encode()):
        return False
    if doc.get("host") and doc.get("host") == host():
        return started(int(doc.get("pid", 0))) == doc.get("pid_start")
    return True


def clean(client: Any, keep: str | None = None, *, of: Callable[[Mapping[str, Any]], bool] | None = None) -> Removed:
    """Remove the leftovers of every dead run on ``client``'s server (OWN-6): the keys of
    its names, the ``{emq}:version`` it wrote on a server that had none, its record.
    Live runs (and the record ``keep``) are left alone; with ``of``, so is every run whose
    record it does not take."""
    removed = Removed()
    for key, doc in _records(client):
        if doc.get("id") == keep or (of is not None and not of(doc)):
            continue
        if alive(client, key, doc):
            removed.live += 1
            continue
        names = Names.from_json(doc["names"])
        removed.keys += _delete(client, list(names.scan(client)))
        if doc.get("version"):
            removed.keys += _drop_fence(client)
        client.delete(key, key + LIVE.encode())
        removed.runs.append(doc)
    return removed


@contextlib.contextmanager
def records_refused(url: str) -> Iterator[None]:
    """Within it, redis-py's errors met reading or writing the run records on ``url``
    (a claim's first commands, ``emq clean``'s) leave as one line naming the URL,
    redacted: a server that answers with an error (an ACL without ``{emq}:run:*``, a
    database it does not have) is ``TargetUnavailable``; one not there, or not
    Redis/Valkey, the client's ``ConnectError``."""
    import redis
    from redis.exceptions import RedisClusterException

    from emq_live.client import _unreachable
    from emq_live.urls import redact

    try:
        yield
    except redis.exceptions.ResponseError as exc:
        raise TargetUnavailable(f"{redact(url)} refused the run's record ({RUN}*): {exc}") from None
    except (redis.exceptions.RedisError, RedisClusterException) as exc:
        raise _unreachable(url, exc) from None


class Claim:
    """The run's claim on the server ``url`` for the logical queue names ``logical``
    (a context manager yielding the run's ``Names``). ``given``: the user's names of
    some logical ones (``--queue``); ``wipe``: keys they already hold may be deleted;
    ``command``: the command's name (``emq check``), in the record and the lines it
    says (``say``: stderr by default); ``apart``: the machine's queues, put on distinct
    primaries of a cluster (OWN-2)."""

    def __init__(self, url: str, logical: Iterable[str], *, given: Mapping[str, str] | None = None,
                 wipe: bool = False, command: str = "emq", say: Callable[[str], None] | None = None,
                 apart: Iterable[str] = ()) -> None:
        from emq_live.urls import redact

        self.url, self.logical, self.given, self.wipe = url, tuple(logical), dict(given or {}), wipe
        self.apart = tuple(apart)
        self.command, self.where = command, redact(url)
        self.say = say or (lambda line: print(line, file=sys.stderr, flush=True))
        self.names: Names | None = None
        self.client: Any = None
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self._key = b""
        self.version = False  # {emq}:version was absent when the run began: the run removes it

    # -- entering ---------------------------------------------------------------------

    def __enter__(self) -> Names:
        from emq_live.client import _client, handshake

        try:
            with records_refused(self.url):  # a cluster client connects at once
                self.client = _client(self.url)  # a URL the client cannot read: its own line, nothing connected
                handshake(self.url, self.client)
                return self._claim()
        except BaseException:
            self._close()
            raise

    def _claim(self) -> Names:
        removed = clean(self.client)
        if removed:
            self.say(f"{self.command}: {removed.line(self.where)}")
        suffix = self._spread()
        taken: set[str] = set()
        while True:
            names = Names(suffix, self.logical, given=self.given, one_byte=self._one_byte(suffix, taken))
            if self.names is None:
                self._refuse_held(names)
            self.names = names
            self._record(names)
            rival = self._rival(names)
            if rival is None:
                break
            taken.add(rival)  # another run took the same one-byte name at once: the later id yields
        self._beat = threading.Thread(target=self._renew, name="emq-claim", daemon=True)
        self._beat.start()
        return self.names

    def _spread(self) -> str:
        """A fresh suffix; on a cluster, one whose names put the machine's queues on as
        many primaries as there are of both (the user's ``--queue`` names as they are): a
        script that reaches into another queue's slot, or any key of another slot, then
        meets a node that refuses it on one queue at least (OWN-2)."""
        suffix = new_suffix()
        if len(self.apart) < 2 or not hasattr(self.client, "get_primaries"):
            return suffix
        nodes = self.client.nodes_manager
        want = min(len(self.apart), len({n.name for n in self.client.get_primaries()}))
        for _ in range(SPREAD_TRIES):
            names = Names(suffix, given=self.given)
            held = {nodes.get_node_from_slot(keyspace.slot(keyspace.prefix(names.server(q)))).name
                    for q in self.apart}
            if len(held) >= want:
                break
            suffix = new_suffix()
        return suffix

    def _one_byte(self, suffix: str, taken: set[str]) -> str | None:
        """A one-byte queue name no key and no run's record holds (None when the run
        sends no one-byte name)."""
        if not one_byte_needed(self.logical):
            return None
        held = set(taken)
        for key in self.client.scan_iter(match="emq:{?}:*", count=1000):
            key = key if isinstance(key, bytes) else str(key).encode()
            held.add(key[5:6].decode("latin-1"))
        for _, doc in _records(self.client):
            held.add(str(doc["names"].get("one_byte")))
        free = [c for c in ONE_BYTE if c not in held]
        if not free:
            raise Occupied(f"every one-byte queue name on {self.where} is held by a key or another run: the raw "
                           "calls' one-byte name has none to take")
        return random.Random(suffix).choice(free)

    def _refuse_held(self, names: Names) -> None:
        """OWN-3: keys already under the run's names are a user's; refused unless wiped.
        A name the user gave that a live run's record lists is that run's: refused."""
        mine = set(self.given.values())
        for key, doc in _records(self.client):
            theirs = mine & set(doc["names"].get("given", {}).values())
            if theirs and alive(self.client, key, doc):
                raise Occupied(f"the queue name {sorted(theirs)[0]!r} on {self.where} is a live run's "
                               f"({doc.get('command', '?')} pid {doc.get('pid', '?')}): give other --queue names")
        held = sorted(names.scan(self.client))
        if not held:
            return
        if self.wipe:
            _delete(self.client, held)
            return
        shown = ", ".join(repr(_text(k)) for k in held[:SHOWN]) + (f" and {len(held) - SHOWN} more"
                                                                     if len(held) > SHOWN else "")
        raise Occupied(f"{self.where} already holds {len(held)} key(s) of queue names this run would write "
                       f"({shown}); give --wipe to let the run delete them")

    def _record(self, names: Names) -> None:
        if self._key == b"":
            self.version = self.client.get(keyspace.VERSION_KEY) is None
        self._key = (RUN + names.suffix).encode()
        seconds, micros = self.client.time()
        doc = {"id": names.suffix, "command": self.command, "pid": os.getpid(), "pid_start": started(os.getpid()),
               "host": host(), "started_ms": int(seconds) * 1000 + int(micros) // 1000, "version": self.version,
               "names": names.to_json()}
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self._key, json.dumps(doc))
        pipe.set(self._key + LIVE.encode(), "1", px=LEASE_MS)
        pipe.execute()

    def _rival(self, names: Names) -> str | None:
        """The one-byte name another live run recorded too, when its id is the lower."""
        if names.one_byte is None:
            return None
        for key, doc in _records(self.client):
            if doc.get("id") != names.suffix and doc["names"].get("one_byte") == names.one_byte \
                    and str(doc.get("id")) < names.suffix:
                return names.one_byte
        return None

    def _renew(self) -> None:
        import redis

        from emq_live.client import _client

        client = _client(self.url)
        try:
            while not self._stop.wait(BEAT):
                try:
                    client.set(self._key + LIVE.encode(), "1", px=LEASE_MS)
                except redis.exceptions.RedisError:
                    continue  # the server is away: the run itself meets that
        finally:
            client.close()

    # -- leaving ----------------------------------------------------------------------

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        self.release(lost=_lost(exc))

    def release(self, *, lost: bool = False) -> int:
        """Delete every key of the run's names, the fence it wrote, its record (OWN-5);
        how many keys. A second Ctrl-C waits until this is done; a server already gone
        keeps them for ``emq clean``, said in one line — unless the run ends on the lost
        server (``lost``), whose own line says so (OWN-5)."""
        # All of it deferred, its first line included: an interrupt raised before the
        # deletion (at an import, the renewal's stop) left the run's record and fence
        with interrupts_deferred():
            return self._release(lost)

    def _release(self, lost: bool) -> int:
        """``release``, its interrupts deferred."""
        import redis
        from redis.exceptions import RedisClusterException

        if self.names is None or self.client is None:
            return 0
        names, self.names = self.names, None
        self._stop.set()
        if self._beat is not None:
            self._beat.join(BEAT)  # a renewal stuck on a server that hangs: the release meets it too
        count = 0
        try:
            count = _delete(self.client, list(names.scan(self.client)))
            if self.version:
                count += _drop_fence(self.client)
            self.client.delete(self._key, self._key + LIVE.encode())
        except (redis.exceptions.RedisError, RedisClusterException, OSError) as exc:
            if not lost:
                self.say(_kept(self.command, "the run's keys", self.where, exc))
        finally:
            self._close()
        return count

    def _close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None


def _lost(exc: BaseException | None) -> bool:
    """Whether a run ends on its lost server: ``exc`` or what it was raised from (the
    CLI's one line replaces the connection error) is a lost connection."""
    import redis

    seen = 0
    while exc is not None and seen < 8:  # a chain is short; a cycle must not hang the exit
        if isinstance(exc, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, ConnectionError)):
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def release_left(url: str, pids: Collection[int], *, command: str,
                 say: Callable[[str], None] | None = None) -> int:
    """Delete what the runs of the processes ``pids`` of this machine, gone by now, left
    on the server ``url``: a local cluster's workers ended with a task under way, their
    claims unreleased (OWN-5); how many keys. The command that started them deletes them
    as its own, its interrupts deferred as a claim's release defers them; a run of those
    processes still alive is left alone, and a server gone keeps them for ``emq clean``,
    said in one line."""
    import redis
    from redis.exceptions import RedisClusterException

    from emq_live.client import _client
    from emq_live.urls import redact

    mine, here = set(pids), host()
    if not mine or not here:
        return 0
    with interrupts_deferred():
        client = None
        try:
            client = _client(url)
            return clean(client, of=lambda doc: doc.get("host") == here and doc.get("pid") in mine).keys
        except (redis.exceptions.RedisError, RedisClusterException, OSError) as exc:
            (say or (lambda line: print(line, file=sys.stderr, flush=True)))(
                _kept(command, "its workers' keys", redact(url), exc))
            return 0
        finally:
            if client is not None:
                client.close()


def _kept(command: str, what: str, where: str, exc: BaseException) -> str:
    """The line of a release that could not delete ``what`` on ``where`` (OWN-5): the
    keys stay for ``emq clean`` once the lease is over."""
    return (f"{command}: could not remove {what} from {where} ({exc}); emq clean --url URL removes them once "
            f"the run's lease ({LEASE_MS // 1000} s) is over")


LOST = "what the run wrote there is removed by emq clean --url URL (or the next run) once the server is back"
"""Said at the end of a lost server's line (OWN-5): the release could not reach it."""


def claimed(url: str | None, logical: Iterable[str], *, command: str, wipe: bool = False,
            given: Mapping[str, str] | None = None, apart: Iterable[str] = ()) -> ContextManager[Names | None]:
    """The run's claim on the server ``url`` (``Claim``: the run's names, its record,
    nothing left after it), or None without a server: the embedded fakeredis and a
    serverless driver hold nobody else's data."""
    if url is None:
        return contextlib.nullcontext(None)
    return Claim(url, logical, given=given, wipe=wipe, command=command, apart=apart)
