"""emq_kit.server: throwaway servers start, answer, persist only when asked, and clean up."""

from __future__ import annotations

import os
import socket

import pytest

import emq_kit.server as server_mod
from emq_kit.server import ServerMissing, ServerProcess, ServerStartError


def _port_is_free(port: int) -> bool:
    """True if a new listener can bind 127.0.0.1:port (SO_REUSEADDR, as a server would)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_above(low: int) -> int:
    """A free loopback port >= low (scanning up), for the cluster bus port case."""
    for port in range(low, 65536):
        if _port_is_free(port):
            return port
    raise RuntimeError(f"no free port above {low}")


def test_valkey_answers_ping_and_eval(valkey: ServerProcess) -> None:
    assert valkey.url == f"redis://127.0.0.1:{valkey.port}"
    assert valkey.port != 6379
    with valkey.client() as c:
        assert c.ping() is True
        assert c.eval("return redis.call('ECHO', ARGV[1]) .. #KEYS", 1, "k", "hi") == b"hi1"
        assert c.info("server")["process_id"] == valkey.pid
    assert valkey.version().split(".")[0].isdigit()
    assert int(valkey.version().split(".")[0]) >= 8


def test_persistence_is_off_by_default(valkey: ServerProcess) -> None:
    with valkey.client(decode_responses=True) as c:
        assert c.config_get("save") == {"save": ""}
        assert c.config_get("appendonly") == {"appendonly": "no"}


def test_redis_server_is_a_second_server(redis_server: ServerProcess) -> None:
    with redis_server.client() as c:
        assert c.ping() is True
        assert c.eval("return 7", 0) == 7
        assert "valkey_version" not in c.info("server")
    assert redis_server.version().startswith("7.")


def test_stop_frees_port_and_removes_dir() -> None:
    srv = ServerProcess()
    with srv:
        port, workdir, pid = srv.port, srv.dir, srv.pid
        assert workdir.is_dir()
        assert srv.log_path.exists()
        assert not _port_is_free(port)
    assert not srv.running
    assert not workdir.exists()
    assert _port_is_free(port)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    srv.stop()  # idempotent


def test_kill_then_restart_keeps_fsynced_write() -> None:
    with ServerProcess(persistence=True) as srv:
        with srv.client(decode_responses=True) as c:
            assert c.config_get("appendonly") == {"appendonly": "yes"}
            assert c.config_get("appendfsync") == {"appendfsync": "always"}
            c.set("emq:test:durable", "kept")
        port, workdir, old_pid = srv.port, srv.dir, srv.pid
        srv.kill()
        assert not srv.running
        srv.restart()
        assert (srv.port, srv.dir) == (port, workdir)
        assert srv.pid != old_pid
        with srv.client(decode_responses=True) as c:
            assert c.get("emq:test:durable") == "kept"


def test_without_persistence_kill_loses_data() -> None:
    with ServerProcess() as srv:
        with srv.client() as c:
            c.set("k", "v")
        srv.kill()
        srv.restart()
        with srv.client() as c:
            assert c.get("k") is None


def test_extra_config_is_applied() -> None:
    with ServerProcess(config={"cluster-enabled": "yes"}) as srv:
        assert srv.cluster_port is not None and srv.cluster_port != srv.port
        with srv.client(decode_responses=True) as c:
            assert c.info("cluster")["cluster_enabled"] == 1
            assert c.config_get("cluster-port") == {"cluster-port": str(srv.cluster_port)}


def test_cluster_mode_on_a_high_port() -> None:
    """The default bus port (port + 10000) would exceed 65535: a free one is used."""
    with ServerProcess(port=free_port_above(56000), config={"cluster-enabled": "yes"}) as srv:
        with srv.client() as c:
            assert c.info("cluster")["cluster_enabled"] == 1


def test_reserved_config_is_refused() -> None:
    with pytest.raises(ValueError, match="port"):
        ServerProcess(config={"port": "6379"})


def test_missing_binary_raises_typed_error_naming_the_install_command() -> None:
    with pytest.raises(ServerMissing) as info:
        ServerProcess("emq-no-such-server").start()
    message = str(info.value)
    assert "emq-no-such-server" in message
    assert "bash scripts/install-valkey.sh" in message
    assert "apt-get install -t bookworm-backports valkey-server" in message
    with pytest.raises(ServerMissing):
        ServerProcess("/nonexistent/valkey-server").version()


def test_bad_config_fails_fast_with_log_tail() -> None:
    with pytest.raises(ServerStartError, match="Bad directive"):
        ServerProcess(config={"emq-bogus-directive": "1"}).start()


def test_port_race_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """A port taken between picking and binding is retried on a fresh one."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        real_free_port = server_mod.free_port
        picks = iter([taken])
        monkeypatch.setattr(server_mod, "free_port", lambda: next(picks, None) or real_free_port())
        with ServerProcess() as srv:
            assert srv.port != taken
            with srv.client() as c:
                assert c.ping() is True
        with pytest.raises(ServerStartError, match="in use|taken"):
            ServerProcess(port=taken).start()


def test_killed_owner_leaves_no_server_and_no_dir() -> None:
    """SIGKILL the process that started a server: the watchdog kills the server and
    removes its temp dir (nothing else would: the owner ran no cleanup)."""
    import select
    import signal
    import subprocess
    import sys
    import time

    owner = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from emq_kit.server import ServerProcess;"
            "s = ServerProcess().start(); print(s.pid, s.port, s.dir, flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        pid_text, port_text, workdir = owner.stdout.readline().split(" ", 2)
        server_pid, port, workdir = int(pid_text), int(port_text), workdir.rstrip("\n")
        server = os.pidfd_open(server_pid)  # the server is alive (it answered PING)
        assert os.path.isdir(workdir)
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=10)
        readable, _, _ = select.select([server], [], [], 15)  # readable once it has exited
        os.close(server)
        assert readable, f"server pid {server_pid} outlived its killed owner"
        assert _port_is_free(port)
        deadline = time.monotonic() + 15
        while os.path.exists(workdir) and time.monotonic() < deadline:
            time.sleep(0.01)  # the watchdog removes the dir right after the server exits
        assert not os.path.exists(workdir), f"{workdir} left behind"
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def test_a_claimed_port_is_not_taken_by_another_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a server is down between kill() and restart(), another ServerProcess (a
    parallel test worker, say) that picks its port moves on to another one."""
    with ServerProcess() as first:
        first.kill()
        picks = iter([first.port])
        real_free_port = server_mod.free_port
        monkeypatch.setattr(server_mod, "free_port", lambda: next(picks, None) or real_free_port())
        with ServerProcess() as second:
            assert second.port != first.port
        first.restart()
        with first.client() as c:
            assert c.ping() is True
