"""The Dask side of a campaign (specs/campaign.md CMP-3..5): which cluster (``local:N``,
a ``LocalCluster`` of N worker processes here, or ``tcp://HOST:PORT``, a running
scheduler), connecting to it with every worker probed first, and handing it a bag of
independent tasks a window at a time. Dask places, retries and reschedules them; the
kit only reads back each task's result or error and the attempts the scheduler saw.

``dask.distributed`` is imported here only, when a campaign runs: the extra
``emq[campaign]`` installs it.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence, TypeVar

from emq_kit import bounds, interrupts
from emq_kit.campaign.tasks import EVENTS, probe, stop
from emq_kit.errors import BadArgument, ClusterUnavailable, ToolMissing
from emq_kit.forks import interrupts_deferred

if TYPE_CHECKING:
    from distributed import Client

T = TypeVar("T")

LOCAL = "local:"
DEFAULT = "local:2"
CONNECT_SECONDS = 10.0
"""How long a scheduler, and its first worker, may take to answer."""
INSTALL = "pip install 'emq[campaign]'"
LOCAL_CONFIG: dict[str, Any] = {
    "distributed.worker.daemon": False,  # the selftest forks a child per mutant (CMP-5)
    # The nanny's default MALLOC_TRIM_THRESHOLD_ (64 KiB) makes glibc hand freed memory
    # back at once; a check allocates and frees without end, so it page-faulted 25 times
    # as often and used a third more CPU than the same child of a plain process (CMP-5).
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
    # A worker mostly waits on its run or its mutant's child; its housekeeping (a stack
    # sample every 10 ms, an event-loop tick every 20 ms, a memory poll every 100 ms)
    # is CPU taken from the runs, all the more on a shared machine (CMP-5).
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.worker.memory.monitor-interval": "1s",
}
"""The configuration a ``local:N`` cluster is started with; docs/campaigns.md gives the
same to a ``dask worker`` on another host."""
LOCAL_PRELOAD = "emq_kit.campaign.local"
"""The module a ``local:N`` cluster's workers load first (``dask_setup``): SIGINT
ignored, as by every child the kit starts (INT-2). The terminal sends Ctrl-C to the
whole process group, the workers too: each died of it with a task under way, its claim
never released, and printed a traceback. The command stops them itself."""


@dataclass(frozen=True)
class ClusterSpec:
    """``--cluster``: ``workers`` processes of a ``LocalCluster`` here, or a running
    scheduler's ``address``."""

    text: str
    workers: int | None = None
    address: str | None = None


def cluster_of(text: str) -> ClusterSpec:
    """``local:N`` (N in ``bounds.CLUSTER``) or ``tcp://HOST:PORT``; anything else is
    ``BadArgument`` (CMP-2)."""
    if text.startswith(LOCAL):
        count = text[len(LOCAL):]
        if not count.isdigit():
            raise BadArgument(f"--cluster {text!r}: local:N needs a number of worker processes")
        why = bounds.CLUSTER.refusal(int(count))
        if why is not None:
            raise BadArgument(f"--cluster {text!r}: the number of worker processes {why}")
        return ClusterSpec(text, workers=int(count))
    if text.startswith(("tcp://", "tls://")) and len(text.split("://", 1)[1]) > 0:
        return ClusterSpec(text, address=text)
    raise BadArgument(f"--cluster {text!r}: give local:N (N worker processes here) or tcp://HOST:PORT "
                      "(a running dask scheduler)")


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise ToolMissing(f"a campaign runs on Dask distributed, which is not installed: {INSTALL}") from None
    return distributed


@contextlib.contextmanager
def connected(spec: ClusterSpec, *, timeout: float | None = None, servers: Sequence[str] = (),
              command: str = "emq") -> Iterator[Client]:
    """A client of the cluster ``spec`` names, its workers probed (``checked``; each
    waited for ``timeout`` seconds, default ``CONNECT_SECONDS``); the
    ``LocalCluster`` of ``local:N`` is started here with ``LOCAL_CONFIG`` (its workers
    allowed children, glibc's own trimming, quiet housekeeping) and ``LOCAL_PRELOAD``
    (SIGINT ignored), and stopped after, however the body ends: its workers gone, what
    their tasks' claims left on ``servers`` (the ones they claim on) is deleted by
    ``command`` (INT-2, OWN-5)."""
    distributed = _distributed()
    import dask

    timeout = CONNECT_SECONDS if timeout is None else timeout
    if spec.workers is not None:
        # set for the cluster's life: a nanny reads it again when it restarts a worker
        # (one killed under a task), which was daemonic then and refused every mutant's child
        with dask.config.set(LOCAL_CONFIG):
            yield from _local(distributed, spec, timeout, servers, command)
        return
    assert spec.address is not None  # a spec is local:N or an address (cluster_of)
    greets(spec.address, timeout)
    try:
        client = distributed.Client(spec.address, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise ClusterUnavailable(f"no Dask scheduler answers at {spec.address}: {exc}") from None
    with client:
        checked(client, spec, timeout)
        yield client


def greets(address: str, timeout: float) -> None:
    """``ClusterUnavailable`` unless what answers at the ``tcp://`` ``address`` speaks
    first, as a Dask scheduler does on every connection (its handshake, which starts
    with a small 8-byte little-endian integer). Another service there (a Valkey, an
    HTTP server) waits for a request, and Dask's own client would wait on it without end
    (CMP-5). A ``tls://`` address is left to Dask's client."""
    import socket

    if not address.startswith("tcp://"):
        return
    host, _, port = address[len("tcp://"):].rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout) as sock:
            first = sock.recv(8)
    except socket.timeout:
        raise ClusterUnavailable(f"{address} answers, but not as a Dask scheduler: it said nothing within "
                                 f"{timeout:g} s") from None
    except (OSError, ValueError) as exc:
        raise ClusterUnavailable(f"no Dask scheduler answers at {address}: {exc}") from None
    if len(first) < 8 or first[4:] != bytes(4):  # a banner ("SSH-2.0-...") is no such integer
        raise ClusterUnavailable(f"{address} answers, but not as a Dask scheduler: its first bytes are no "
                                 "Dask handshake")


def _local(distributed: Any, spec: ClusterSpec, timeout: float, servers: Sequence[str],
           command: str) -> Iterator[Client]:
    """``connected``'s ``local:N``: the cluster started, its client yielded, and stopped
    after, what its workers left deleted."""
    try:
        # A signal while the workers start is acted on once they have (INT-2): cut
        # half-way, the start left a cluster Dask's exit hook failed on (a traceback).
        with interrupts_deferred():
            cluster = distributed.LocalCluster(n_workers=spec.workers, threads_per_worker=1, processes=True,
                                               dashboard_address=":0", silence_logs=logging.ERROR,
                                               preload=[LOCAL_PRELOAD])
    except Exception:
        # the group's Ctrl-C killed a worker in its imports, before its preload ignores
        # SIGINT: Dask's "Nanny failed to start" is the interrupt's doing, not a kit bug
        interrupts.check()
        raise
    workers: set[int] = set()  # every worker process the run had
    left = True  # whether a worker may have left keys: a task under way as it closes
    try:
        with distributed.Client(cluster) as client:
            workers |= _pids(cluster)
            checked(client, spec, timeout)
            try:
                yield client
            except BaseException:
                # The command ends early (Ctrl-C, an error of the kit): each task under
                # way stops at its next stopping point, its claim released by its
                # worker, which the close below waits for
                workers |= _pids(cluster)
                with contextlib.suppress(Exception):
                    client.run(stop, on_error="ignore")
                raise
            # every task ended, each claim released by its own worker: only a worker
            # that died under one (its nanny started another) can have left keys
            left = bool(workers - _pids(cluster))
    finally:
        workers |= _pids(cluster)
        _closed(cluster, workers, servers if left else (), command)


def _closed(cluster: Any, workers: set[int], servers: Sequence[str], command: str) -> None:
    """Close a ``LocalCluster`` (its workers given a few seconds to end their tasks, then
    killed; joined either way), then delete what a task of its ``workers`` that never
    ended its run left on ``servers``: a worker killed under its claim (SIGTERM to the
    group, a task that did not stop) leaves its keys, its record and the ``{emq}:version``
    it wrote (OWN-5). A second Ctrl-C waits for both: its workers alive, their runs are
    not dead, and nothing of theirs could be deleted."""
    from emq_kit.claim import release_left

    with interrupts_deferred():
        try:
            cluster.close()
        finally:
            for url in dict.fromkeys(servers):
                release_left(url, workers, command=command)


def _pids(cluster: Any) -> set[int]:
    """The processes of a ``LocalCluster``'s workers now running (its nannies' children)."""
    return {pid for nanny in list(cluster.workers.values()) if isinstance(pid := getattr(nanny, "pid", None), int)}


def _bokeh() -> bool:
    """Whether Dask's dashboard can be served here (its pages need bokeh; without it a
    local cluster serves only its HTTP routes, on a free port: ``:0``)."""
    import importlib.util

    return importlib.util.find_spec("bokeh") is not None


def checked(client: Client, spec: ClusterSpec, timeout: float) -> None:
    """Every worker of ``client`` has this kit's version and may start a child process;
    there is at least one (CMP-5). Else one ``ClusterUnavailable`` naming the first
    worker that is not fit, and why."""
    from emq_kit.report.document import kit_version

    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise ClusterUnavailable(f"the Dask scheduler at {spec.text} has no worker after {timeout:g} s "
                                 "(start one: dask worker ADDRESS)") from None
    ours = kit_version()
    for worker, said in sorted(client.run(probe, on_error="return").items()):
        if isinstance(said, BaseException):
            raise ClusterUnavailable(f"worker {worker} cannot run the kit ({type(said).__name__}: {said}): "
                                     f"{INSTALL} on every worker") from None
        if said["emq"] != ours:
            raise ClusterUnavailable(f"worker {worker} has emq {said['emq']}, this client {ours}: install the "
                                     "same version on every worker")
        if not said["children"]:
            raise ClusterUnavailable(f"worker {worker} may not start a child process: start it with "
                                     "DASK_DISTRIBUTED__WORKER__DAEMON=False")


def dashboard(client: Client) -> str | None:
    """The cluster's dashboard link, when it serves one (a local cluster does when bokeh
    is installed)."""
    if getattr(client, "cluster", None) is not None and not _bokeh():
        return None
    link = getattr(client, "dashboard_link", None)
    return str(link) if link else None


def threads(client: Client) -> int:
    """How many tasks the cluster runs at once."""
    return max(1, sum(client.nthreads().values()))


@dataclass
class Done:
    """One task's end: its item, its Dask key, its result or the error it ended with."""

    item: Any
    key: str
    result: Any = None
    error: BaseException | None = None


def bag(client: Client, items: Sequence[T], task: Callable[..., Any], args: Callable[[T], tuple[Any, ...]], *,
        retries: int, name: Callable[[T], str]) -> Iterator[Done]:
    """Run ``task(*args(item))`` for every item on the cluster, yielding each ``Done``
    as it ends (in any order). At most as many tasks are out as the cluster runs at
    once, so ``args`` is called when a task is handed out and sees what earlier ones
    gave back (the corpus, CMP-7). A task that raises is retried ``retries`` times by
    Dask; a task whose worker is lost is rescheduled by the scheduler."""
    distributed = _distributed()
    queue = list(items)
    out: dict[str, T] = {}
    running = distributed.as_completed()
    tag = uuid.uuid4().hex[:8]

    def hand_out() -> None:
        item = queue.pop(0)
        key = f"emq-{name(item)}-{tag}"
        future = client.submit(task, *args(item), key=key, pure=False, retries=retries)
        out[key] = item
        running.add(future)

    for _ in range(min(threads(client), len(queue))):
        hand_out()
    for future in running:
        item = out.pop(future.key)
        if future.status == "error":
            yield Done(item, future.key, error=future.exception())
        else:
            yield Done(item, future.key, result=future.result())
        future.release()
        if queue:
            hand_out()


def attempts(client: Client) -> dict[str, list[str]]:
    """Each task's starts as the scheduler logged them (``tasks.started``): its Dask key
    -> the workers that started it, in order (two or more: retried, CMP-4)."""
    seen: dict[str, list[str]] = defaultdict(list)
    for _, event in sorted(client.get_events(EVENTS), key=lambda e: e[0]):
        seen[str(event["key"])].append(event["worker"])
    return dict(seen)
