"""Throwaway Valkey / Redis servers for tests, the CLI and crash experiments.

Contract:

* ``ServerProcess()`` starts ``valkey-server`` (or any compatible ``binary``, e.g.
  ``redis-server``) bound to 127.0.0.1 on a free port chosen here — never the default
  port 6379 — with its working dir in a fresh temp dir, and stdout/stderr in
  ``<dir>/server.log``.
* Persistence is off unless asked: ``save ""`` and ``appendonly no``. With
  ``persistence=True`` the server runs ``appendonly yes`` / ``appendfsync always``, so a
  write that was answered survives ``kill()`` + ``restart()``.
* ``start()`` returns only once the server answers PING *and* reports our pid (so a
  foreign server that won a port race is never mistaken for ours). The wait is bounded;
  on timeout or early exit it raises ``ServerStartError`` carrying the log tail.
* A missing binary raises ``ServerMissing`` naming the install command. Never a skip.
* ``stop()`` ends the server and removes the temp dir; the object is then spent.
  ``kill()`` sends SIGKILL and keeps the dir; ``restart()`` brings the server back on
  the same port with the same dir (after a graceful shutdown if it is still running).
* Nothing is left behind, even when the owning process is killed with SIGKILL: every
  server and temp dir is registered with a watchdog, one small process per owner
  process, which SIGKILLs the servers still registered, waits for them to exit and
  removes the dirs when its pipe from the owner closes (exit or death alike).
* Ports are claimed among emq processes on the machine (an abstract unix socket named
  for the port, held while the object lives), so parallel test workers never pick a
  port another one owns, even while that server is down between ``kill()`` and
  ``restart()``.

Only the stdlib and redis-py are used; the watchdog and the port claims need Linux.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from emq_kit._signals import PortTaken
from emq_kit.errors import ServerError, ServerMissing, ServerStartError

__all__ = [
    "INSTALL_HINT",
    "ServerError",
    "ServerMissing",
    "ServerProcess",
    "ClusterProcess",
    "ServerStartError",
    "free_port",
]

HOST = "127.0.0.1"
DEFAULT_BINARY = "valkey-server"

INSTALL_HINT = (
    "Install the servers with `bash scripts/install-valkey.sh` (as root), or by hand: "
    "add a `bookworm-backports` apt source (see DEVELOPERS.md), then "
    "`apt-get install -t bookworm-backports valkey-server valkey-tools`; "
    "Debian's Redis 7.0 for a second server: `apt-get install redis-server`."
)

# Directives this class owns; a caller's ``config`` may not set them.
_RESERVED = frozenset({"port", "bind", "dir", "daemonize", "logfile", "pidfile", "include"})
_PORT_ATTEMPTS = 5
_LOG_NAME = "server.log"
_CONF_NAME = "server.conf"


# The watchdog's program (run with ``python -I -S -c``). It forks at once and the launcher
# exits, so the watchdog is no child of the owner (a caller counting its children sees
# only its servers) and keeps the pipes. Its stdin is the owner's pipe: ``dir PATH`` /
# ``-dir PATH`` register and forget a temp dir, ``pid N`` / ``-pid N`` a server. For
# ``pid`` it opens a pidfd (the process is the owner's unreaped child at that moment, so
# the pid is not yet recyclable) and answers ``ok``, which the owner waits for. At EOF —
# the owner exited or was killed — it SIGKILLs each server still registered through its
# pidfd (never a recycled pid), waits until each has exited, and removes the dirs still
# registered.
_WATCHDOG_PROGRAM = r"""
import os, select, shutil, signal, sys
if os.fork():
    os._exit(0)
pidfds, dirs = {}, set()
for line in sys.stdin:
    op, arg = line.rstrip("\n").split(" ", 1)
    if op == "pid":
        try:
            pidfds[arg] = os.pidfd_open(int(arg))
        except ProcessLookupError:
            pass  # already exited and reaped (by a caller's waitpid(-1)): nothing to guard
        sys.stdout.write("ok\n")
        sys.stdout.flush()
    elif op == "-pid" and arg in pidfds:
        os.close(pidfds.pop(arg))
    elif op == "dir":
        dirs.add(arg)
    elif op == "-dir":
        dirs.discard(arg)
for fd in pidfds.values():
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass
for fd in pidfds.values():
    select.select([fd], [], [], 10)  # a pidfd turns readable when its process exits
for path in dirs:
    shutil.rmtree(path, ignore_errors=True)
"""


class _Watchdog:
    """The owner's end of the watchdog: started on first use, again after a fork or if
    it is gone (the servers registered with the lost one are then unguarded)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pipes: tuple[IO[str], IO[str]] | None = None
        self._owner = 0

    def tell(self, op: str, arg: object) -> None:
        """Send one registration; for ``pid`` wait until the watchdog holds the pidfd."""
        with self._lock:
            for fresh in (False, True):
                if fresh or self._pipes is None or self._owner != os.getpid():
                    self._spawn()
                assert self._pipes is not None
                to_watchdog, from_watchdog = self._pipes
                try:
                    to_watchdog.write(f"{op} {arg}\n")
                    to_watchdog.flush()
                except BrokenPipeError:
                    continue
                if op == "pid" and from_watchdog.readline() != "ok\n":
                    raise ServerError(f"the server watchdog failed to watch pid {arg}")
                return
            raise ServerError("the server watchdog cannot be started")

    def _spawn(self) -> None:
        launcher = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _WATCHDOG_PROGRAM],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # a Ctrl-C to our process group must not end it first
        )
        launcher.wait()  # exits once it has forked the watchdog, which keeps the pipes
        assert launcher.stdin is not None and launcher.stdout is not None
        self._pipes = (launcher.stdin, launcher.stdout)
        self._owner = os.getpid()


_WATCHDOG = _Watchdog()


def _claim(port: int) -> socket.socket | None:
    """Claim ``port`` among emq processes on this machine: bind the abstract unix socket
    named for it (the kernel releases it when its holder closes it or dies). ``None``
    when another holder has it."""
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0emq-server-port-{port}")
    except OSError:
        claim.close()
        return None
    return claim


def free_port(host: str = HOST) -> int:
    """Return a TCP port on ``host`` that was free a moment ago (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _resolve(binary: str) -> str:
    """Absolute path of ``binary`` (a name on PATH or a path), else ``ServerMissing``."""
    if os.sep in binary:
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return os.path.abspath(binary)
        raise ServerMissing(binary, INSTALL_HINT)
    found = shutil.which(binary)
    if found is None:
        raise ServerMissing(binary, INSTALL_HINT)
    return found


def _quote(value: str) -> str:
    """Quote one config value the way the server's config parser reads it."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _cleanup(
    proc_box: list[subprocess.Popen[bytes] | None], workdir: str, claims: list[socket.socket]
) -> None:
    """Finalizer: kill a server that was never stopped, remove its dir, free its ports."""
    proc = proc_box[0]
    if proc is not None and proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    shutil.rmtree(workdir, ignore_errors=True)
    _WATCHDOG.tell("-dir", workdir)
    for claim in claims:
        claim.close()
    claims.clear()


class ServerProcess:
    """One throwaway server process on 127.0.0.1; see the module docstring.

    Args:
        binary: executable name on PATH, or a path (default ``valkey-server``).
        persistence: ``True`` for ``appendonly yes`` + ``appendfsync always``.
        config: extra directives, ``{"cluster-enabled": "yes"}``; the value is written
            verbatim after the name, so ``{"save": '"60 1"'}`` works. Written after the
            defaults, so it can override ``save``/``appendonly``/``appendfsync``, but not
            the directives this class owns (port, bind, dir, daemonize, logfile, pidfile).
        startup_timeout: seconds ``start()``/``restart()`` wait for PING.
        port: a fixed port instead of a free one (no retry on a bind race then).

    With ``cluster-enabled yes`` and no ``cluster-port`` in ``config``, a free cluster bus
    port is picked as well (``.cluster_port``), kept across ``restart()``.
    """

    def __init__(
        self,
        binary: str = DEFAULT_BINARY,
        *,
        persistence: bool = False,
        config: Mapping[str, str] | None = None,
        startup_timeout: float = 15.0,
        port: int | None = None,
    ) -> None:
        self.binary = binary
        self.persistence = persistence
        self.config: dict[str, str] = dict(config or {})
        bad = sorted(k for k in self.config if k.lower() in _RESERVED)
        if bad:
            raise ValueError(f"config may not set {bad}: ServerProcess owns them")
        self.startup_timeout = startup_timeout
        self.host = HOST
        self._fixed_port = port
        self._port: int | None = port
        # Cluster mode: the bus port defaults to port + 10000, which may be taken or
        # exceed 65535 for a high free port; so pick a free bus port too (cluster-port).
        self._wants_bus_port = (
            self.config.get("cluster-enabled", "").strip().strip('"').lower() == "yes"
            and not any(k.lower() == "cluster-port" for k in self.config)
        )
        self.cluster_port: int | None = None
        self._path: str | None = None
        self._dir: Path | None = None
        self._proc_box: list[subprocess.Popen[bytes] | None] = [None]
        self._claims: list[socket.socket] = []  # the port claims, held until stop()
        self._finalizer: Callable[[], object] | None = None
        self._spent = False

    # ----------------------------------------------------------------- properties

    @property
    def _proc(self) -> subprocess.Popen[bytes] | None:
        return self._proc_box[0]

    @property
    def port(self) -> int:
        """The TCP port (fixed for the life of this object once started)."""
        if self._port is None:
            raise ServerError("server not started")
        return self._port

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT``."""
        return f"redis://{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        """Pid of the running server process."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise ServerError("server not running")
        return proc.pid

    @property
    def dir(self) -> Path:
        """The temp dir: the server's working dir, config, data and log."""
        if self._dir is None:
            raise ServerError("server not started")
        return self._dir

    @property
    def log_path(self) -> Path:
        """The file that receives the server's stdout and stderr."""
        return self.dir / _LOG_NAME

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        proc = self._proc
        return proc is not None and proc.poll() is None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ServerProcess:
        """Start the server and wait until it answers PING; return ``self``.

        Raises ``ServerMissing`` for a missing binary, ``ServerStartError`` on timeout or
        early exit (with the log tail). A port lost to a bind race is retried on a new one.
        """
        if self._spent:
            raise ServerError("this ServerProcess was stopped; make a new one")
        if self.running:
            raise ServerError("server already running")
        self._path = _resolve(self.binary)
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="emq-server-"))
            self._finalizer = weakref.finalize(
                self, _cleanup, self._proc_box, str(self._dir), self._claims
            )
            _WATCHDOG.tell("dir", self._dir)
        attempts = 1 if self._fixed_port is not None else _PORT_ATTEMPTS
        for attempt in range(1, attempts + 1):
            self._port = self._fixed_port if self._fixed_port is not None else free_port()
            if self._wants_bus_port:
                self.cluster_port = free_port()
                while self.cluster_port == self._port:
                    self.cluster_port = free_port()
            try:
                self._claim_ports()
                self._launch()
                return self
            except PortTaken as exc:
                if attempt == attempts:
                    self._discard()
                    raise ServerStartError(
                        f"{self.binary}: could not bind a free port after {attempts} tries: {exc}"
                    ) from exc
            except BaseException:
                self._discard()
                raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _claim_ports(self) -> None:
        """Claim the port (and bus port) picked for this attempt, dropping the last
        attempt's claims; ``PortTaken`` if another emq server owns one of them."""
        for held in self._claims:
            held.close()
        self._claims.clear()
        for port in (self._port, self.cluster_port):
            if port is None:
                continue
            claim = _claim(port)
            if claim is None:
                raise PortTaken(f"port {port}: claimed by another emq server")
            self._claims.append(claim)

    def _discard(self) -> None:
        """After a failed start(): kill the process, remove the dir, allow a new start()."""
        self._halt(signal.SIGKILL)
        if self._finalizer is not None:
            self._finalizer()
        self._finalizer = None
        self._dir = None
        self._port = self._fixed_port
        self.cluster_port = None

    def stop(self, timeout: float = 10.0) -> None:
        """Shut the server down (SIGTERM, then SIGKILL after ``timeout``) and remove its
        temp dir. Idempotent; the object cannot be started again afterwards."""
        if self._spent:
            return
        self._halt(signal.SIGTERM, timeout=timeout)
        self._spent = True
        if self._finalizer is not None:
            self._finalizer()  # removes the dir (process already gone)
        self._dir = None

    def kill(self) -> None:
        """SIGKILL the server (a crash) and reap it; the data dir and port are kept."""
        if self._proc is None or self._proc.poll() is not None:
            raise ServerError("server not running")
        self._halt(signal.SIGKILL)

    def restart(self) -> ServerProcess:
        """Start the server again on the same port with the same data dir; a running
        server is shut down gracefully first. Returns ``self`` once PING answers."""
        if self._spent or self._dir is None or self._port is None:
            raise ServerError("restart() needs a server that was started and not stopped")
        self._halt(signal.SIGTERM)
        try:
            self._launch()
        except PortTaken as exc:
            raise ServerStartError(
                f"{self.binary}: port {self._port} is taken, cannot restart: {exc}"
            ) from exc
        return self

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else ("stopped" if self._spent else "idle")
        return f"<ServerProcess {self.binary} {self.host}:{self._port} {state}>"

    # -------------------------------------------------------------------- queries

    def client(self, **kwargs: Any) -> redis.Redis:
        """A new redis-py client for this server (caller closes it)."""
        return redis.Redis(host=self.host, port=self.port, **kwargs)

    def version(self) -> str:
        """The server's version, e.g. ``"8.0.1"`` for Valkey 8 or ``"7.0.15"`` for Redis.

        Asked over the wire while running (``valkey_version``, else ``redis_version``),
        else read from ``BINARY --version``."""
        if self.running:
            with self.client(socket_timeout=5) as c:
                info = c.info("server")
            return str(info.get("valkey_version") or info["redis_version"])
        out = subprocess.run(
            [_resolve(self.binary), "--version"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        m = re.search(r"\bv=(\S+)", out)
        if m is None:
            raise ServerError(f"cannot read a version from {out!r}")
        return m.group(1)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log ('' if there is none)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except (OSError, ServerError):
            return ""
        return "\n".join(text.splitlines()[-lines:])

    # ------------------------------------------------------------------ internals

    def _write_config(self) -> Path:
        lines = [
            f"port {self.port}",
            f"bind {self.host}",
            f"dir {_quote(str(self.dir))}",
            "daemonize no",
            'logfile ""',
            'save ""',
            "appendonly yes" if self.persistence else "appendonly no",
        ]
        if self.persistence:
            lines.append("appendfsync always")
        if self.cluster_port is not None:
            lines.append(f"cluster-port {self.cluster_port}")
        lines += [f"{k} {v}" for k, v in self.config.items()]
        conf = self.dir / _CONF_NAME
        conf.write_text("\n".join(lines) + "\n")
        return conf

    def _launch(self) -> None:
        """Spawn the process on ``self._port`` and wait for it; raise on failure."""
        assert self._path is not None
        conf = self._write_config()
        log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                [self._path, str(conf)],
                cwd=self.dir,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # terminal signals reach only us, not the server
            )
        self._proc_box[0] = proc
        _WATCHDOG.tell("pid", proc.pid)
        self._wait_ready(proc, log_offset)

    def _wait_ready(self, proc: subprocess.Popen[bytes], log_offset: int) -> None:
        """Poll until ``proc`` answers PING with its own pid; raise on exit or timeout."""
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.005
        last_error: BaseException | None = None
        while True:
            if proc.poll() is not None:
                if "Address already in use" in self._log_since(log_offset):
                    raise PortTaken(f"port {self._port}: address already in use")
                raise ServerStartError(
                    f"{self.binary} exited with code {proc.returncode} during startup "
                    f"(port {self._port}, dir {self._dir}). Log tail:\n{self.log_tail()}"
                )
            if time.monotonic() >= deadline:
                raise ServerStartError(
                    f"{self.binary} did not answer PING within {self.startup_timeout}s "
                    f"(port {self._port}, pid {proc.pid}, dir {self._dir}; last error: "
                    f"{last_error!r}). Log tail:\n{self.log_tail()}"
                )
            try:
                # One try per poll: redis-py's own retries would overrun the deadline.
                with self.client(
                    socket_connect_timeout=0.5, socket_timeout=1, retry=Retry(NoBackoff(), 0)
                ) as c:
                    c.ping()
                    pid = int(c.info("server")["process_id"])
                if pid == proc.pid:
                    return
                last_error = ServerError(f"port {self._port} answered from pid {pid}")
            except redis.exceptions.RedisError as exc:
                last_error = exc  # not listening yet, or still loading its data
            time.sleep(delay)
            delay = min(delay * 2, 0.1)

    def _log_since(self, offset: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _halt(self, sig: signal.Signals, timeout: float = 10.0) -> None:
        """Send ``sig`` to a live server and reap it (SIGKILL if it outlives timeout)."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        _WATCHDOG.tell("-pid", proc.pid)
        self._proc_box[0] = None


class ClusterProcess:
    """A throwaway Valkey Cluster on 127.0.0.1: ``primaries`` servers with
    ``cluster-enabled yes`` (each a ``ServerProcess`` with its own dir, port and bus port),
    joined by ``<cli> --cluster create ... --cluster-replicas 0 --cluster-yes``.

    ``start()`` returns once every node reports ``cluster_state:ok`` with all 16384 slots
    and all nodes known, and every node hands out the same slot map (polled with a bounded
    deadline; ``ServerStartError`` with the cli's output or the nodes' state otherwise).
    ``url`` is ``redis+cluster://127.0.0.1:PORT`` of the first node, the cluster scheme of
    ``emq_live.connect``. Usable outside pytest: ``with ClusterProcess() as c: ...``.

    Args:
        primaries: how many primary nodes (at least 3, the cli's minimum).
        binary: the server executable; ``cli`` defaults to its sibling
            (``valkey-server`` -> ``valkey-cli``, ``redis-server`` -> ``redis-cli``).
        persistence, config: passed to every node's ``ServerProcess``.
        startup_timeout: seconds for the cli and for the cluster to settle.
    """

    def __init__(
        self,
        primaries: int = 3,
        *,
        binary: str = DEFAULT_BINARY,
        cli: str | None = None,
        persistence: bool = False,
        config: Mapping[str, str] | None = None,
        startup_timeout: float = 30.0,
    ) -> None:
        if primaries < 3:
            raise ValueError("a cluster needs at least 3 primaries")
        self.binary = binary
        self.cli = cli if cli is not None else _sibling_cli(binary)
        self.startup_timeout = startup_timeout
        node_config = {**dict(config or {}), "cluster-enabled": "yes"}
        self.nodes = [ServerProcess(binary, persistence=persistence, config=node_config) for _ in range(primaries)]

    @property
    def addresses(self) -> list[str]:
        """``127.0.0.1:PORT`` of every node, in start order."""
        return [f"{n.host}:{n.port}" for n in self.nodes]

    @property
    def url(self) -> str:
        """``redis+cluster://127.0.0.1:PORT`` of the first node (any node is a seed)."""
        return f"redis+cluster://{self.addresses[0]}"

    def start(self) -> ClusterProcess:
        """Start the nodes, create the cluster and wait until it is settled."""
        cli = _resolve(self.cli)
        try:
            for node in self.nodes:
                node.start()
            try:
                done = subprocess.run(
                    [cli, "--cluster", "create", *self.addresses, "--cluster-replicas", "0", "--cluster-yes"],
                    capture_output=True,
                    text=True,
                    timeout=self.startup_timeout,
                    stdin=subprocess.DEVNULL,
                )
            except subprocess.TimeoutExpired as exc:
                raise ServerStartError(f"{self.cli} --cluster create did not finish in {self.startup_timeout}s") from exc
            if done.returncode != 0:
                raise ServerStartError(
                    f"{self.cli} --cluster create exited with {done.returncode}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
                )
            self._wait_settled()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node and remove their dirs. Idempotent."""
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> ClusterProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<ClusterProcess {' '.join(self.addresses) if all(n.running for n in self.nodes) else 'down'}>"

    def client(self, **kwargs: Any) -> Any:
        """A new ``redis.cluster.RedisCluster`` seeded with the first node (caller closes it)."""
        from redis.cluster import RedisCluster

        return RedisCluster(host=self.nodes[0].host, port=self.nodes[0].port, **kwargs)

    def slot_map(self) -> list[tuple[int, int, int]]:
        """``(first slot, last slot, port of its primary)`` for every range, sorted, as the
        first node hands it out."""
        with self.nodes[0].client(socket_timeout=5) as c:
            return _slot_map(c)

    def node_of(self, key: str | bytes) -> ServerProcess:
        """The node whose primary serves ``key``'s slot."""
        from emq_model.keyspace import slot

        s = slot(key)
        port = next(p for lo, hi, p in self.slot_map() if lo <= s <= hi)
        return next(n for n in self.nodes if n.port == port)

    def _wait_settled(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.01
        while True:
            state = self._state()
            if state is None:
                return
            if time.monotonic() >= deadline:
                raise ServerStartError(f"the cluster did not settle within {self.startup_timeout}s: {state}")
            time.sleep(delay)  # the nodes gossip the new configuration: nothing to wait on
            delay = min(delay * 2, 0.2)

    def _state(self) -> str | None:
        """``None`` once settled, else what is not settled yet."""
        maps = []
        for node in self.nodes:
            try:
                with node.client(socket_timeout=5, retry=Retry(NoBackoff(), 0)) as c:
                    info = c.cluster("info")
                    maps.append(_slot_map(c))
            except redis.exceptions.RedisError as exc:
                return f"{node.port}: {exc!r}"
            info = info if isinstance(info, dict) else {}
            want = {"cluster_state": "ok", "cluster_slots_ok": 16384, "cluster_known_nodes": len(self.nodes)}
            seen = {k: _plain(info.get(k)) for k in want}
            if seen != {k: _plain(v) for k, v in want.items()}:
                return f"{node.port}: {seen}"
        if any(m != maps[0] for m in maps) or len(maps[0]) != len(self.nodes):
            return f"slot maps differ: {maps}"
        return None


def _plain(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _slot_map(client: redis.Redis) -> list[tuple[int, int, int]]:
    """CLUSTER SLOTS as sorted ``(first, last, primary port)``."""
    ranges = client.execute_command("CLUSTER SLOTS")
    return sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in ranges)


def _sibling_cli(binary: str) -> str:
    """``valkey-server`` -> ``valkey-cli`` (a path keeps its dir)."""
    head, name = os.path.split(binary)
    stem = name[: -len("-server")] if name.endswith("-server") else name
    return os.path.join(head, stem + "-cli")
