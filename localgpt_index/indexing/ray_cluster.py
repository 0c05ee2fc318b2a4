"""`build --ray`: joining (or starting) the Ray cluster, and leaving it.

`--ray local` starts a cluster on loopback only; `--ray HOST:PORT` is probed first, so that an
address where nothing listens fails at once, naming it; signals keep working while Ray starts.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stdout

from ..core.cpus import available_cpus
from ..core.errors import EnvironmentMissing, LgptError


def require_ray():
    try:
        import ray
    except ImportError:
        raise EnvironmentMissing("--ray needs Ray, which is not installed.",
                                 hint="pip install 'lgpt-index[ray]' (on the driver and every node of the cluster).") from None
    return ray


PROBE_TIMEOUT_S = 5.0  # a cluster address that does not accept a connection in this long is down
# Ray retries a GCS that accepts but does not answer (not a Ray head) about 35 s a try, 20 tries:
# one try, unless the operator set RAY_gcs_server_port_wait_time_s
GCS_TRIES = "1"


def connect_ray(address: str) -> bool:
    """Join the cluster at `address` (auto, an address, or local: start one here, on loopback only).
    True when this call started Ray (and the build should shut it down)."""
    ray = require_ray()
    if ray.is_initialized():
        return False
    options = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    try:
        if address == "local":
            with _loopback_only(ray), _shut_down_if_interrupted(ray), _sigterm_kept():
                ray.init(num_cpus=available_cpus(), _node_ip_address="127.0.0.1", **options)
        else:
            probe(address)
            with _environ("RAY_gcs_server_port_wait_time_s", GCS_TRIES), _sigterm_kept():
                _init_interruptibly(ray, address=address, **options)
    except LgptError:
        raise
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
        raise EnvironmentMissing(f"--ray {address}: cannot join the cluster ({' '.join(str(exc).split())[:200]}).",
                                 hint="Start it (ray start --head) or pass --ray local.") from None
    return True


def _init_interruptibly(ray, **options) -> None:
    """ray.init(**options) in a daemon thread, the main thread waiting in short joins. Against an
    address that accepts but is not a Ray head, Ray waits about 40 s in its C++ code, where a
    signal (SIGTERM, Ctrl-C) is not handled; here it interrupts the wait at once, and the thread is
    left to end with the process (Ray's own exit handler finds nothing connected yet)."""
    failure: list[BaseException] = []

    def init() -> None:
        try:
            with _unlogged("ray._private.worker", "SIGTERM handler is not set"):  # as intended
                ray.init(**options)
        except BaseException as exc:  # re-raised on the main thread
            failure.append(exc)

    thread = threading.Thread(target=init, name="lgpt-ray-init", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(0.1)
    if failure:
        raise failure[0]


def probe(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Fail at once, naming the address, where nothing accepts a connection at a cluster's address
    (Ray itself would retry for ever). auto is left to Ray (it fails fast without a cluster)."""
    import socket

    if address in ("auto", "local"):
        return
    host, port = _host_port(address)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        where = f"{host}:{port}" if f"{host}:{port}" != address else address
        raise EnvironmentMissing(f"--ray {address}: nothing accepts a connection at {where} "
                                 f"({exc.strerror or exc or 'timed out'}).",
                                 hint="Start the cluster (ray start --head), check the address, or pass --ray local.") from None


def _host_port(address: str) -> tuple[str, int]:
    """Where Ray will connect for `address`: ray://HOST:PORT (Ray Client) as given, HOST:PORT as Ray
    resolves it (localhost becomes this node's address)."""
    from ..core.errors import UsageError

    client = address.startswith("ray://")
    target = address[len("ray://"):] if client else address
    if not client:
        try:
            from ray._private.services import canonicalize_bootstrap_address

            target = canonicalize_bootstrap_address(address) or target
        except Exception:  # an address Ray cannot parse: the check below says why
            pass
    host, sep, port = target.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray {address}: not a cluster address (auto, local, HOST:PORT or ray://HOST:PORT).")
    return host, int(port)


@contextmanager
def _sigterm_kept() -> Iterator[None]:
    """The SIGTERM handler put back after ray.init, which replaces it: on the main thread with its
    own (exit with status 15, skipping the CLI's interrupt handling, its message and exit code), and
    in any thread with a C++ one that prints a stack dump before calling it."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as exc:  # Ray's handler, set first thing in ray.init, fired: sys.exit(15)
        if exc.code != signal.SIGTERM:
            raise
        raise KeyboardInterrupt from None  # the CLI's interrupt: its message, exit code and clean-up
    finally:
        if before is not None:  # None: set from C, cannot be put back from Python
            signal.signal(signal.SIGTERM, before)


@contextmanager
def _shut_down_if_interrupted(ray) -> Iterator[None]:
    """An interrupt during ray.init stops what it had started of the local cluster."""
    try:
        yield
    except KeyboardInterrupt:
        try:
            ray.shutdown()
        except Exception:  # half-started: what is left ends with this process (Ray's fate-sharing)
            pass
        raise


@contextmanager
def _unlogged(logger_name: str, text: str) -> Iterator[None]:
    """Log records of `logger_name` that contain `text` dropped for the duration."""
    logger = logging.getLogger(logger_name)

    def keep(record: logging.LogRecord) -> bool:
        return text not in record.getMessage()

    logger.addFilter(keep)
    try:
        yield
    finally:
        logger.removeFilter(keep)


@contextmanager
def _environ(name: str, value: str) -> Iterator[None]:
    """`name` set to `value` for the duration, unless already set."""
    if name in os.environ:
        yield
        return
    os.environ[name] = value
    try:
        yield
    finally:
        os.environ.pop(name, None)


@contextmanager
def _loopback_only(ray) -> Iterator[None]:
    """A local cluster reachable from this machine only: its GCS, raylet, workers and agents listen on
    127.0.0.1 when the node's address is 127.0.0.1. Ray on Linux turns a loopback node address
    into the machine's network address unless clusters are off (its Windows/macOS default), which
    is what this does while the cluster starts (its processes inherit the setting)."""
    try:
        from ray._private import ray_constants
    except ImportError:  # another layout (a Ray this was not written against): its own defaults
        ray_constants = None  # no constants module: the getattr below finds nothing
    before = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    if before is not None:
        ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        with _environ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0"):
            yield
    finally:
        if before is not None:
            ray_constants.ENABLE_RAY_CLUSTER = before


def disconnect_ray() -> None:
    with quiet_stdout():
        require_ray().shutdown()


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """stdout carries only results (a --json report): what Ray prints meanwhile (a retried task,
    a restarted actor) goes to stderr."""
    with redirect_stdout(sys.stderr):
        yield
