"""``fedaug flower serve`` / ``fedaug flower client``: a Flower 1.41 deployment, TLS by default.

Flower 1.41's deployment has three parts, all started here with Flower's own executables:

* the SuperLink (``flower-superlink``): serves the Fleet, Control and Runtime APIs on one HTTPS port
  (``--ssl-ca-certfile/--ssl-certfile/--ssl-keyfile``). Flower 1.41 moved these APIs from gRPC to HTTP(S);
  its gRPC Fleet API is a deprecated compatibility server that 1.41's SuperNode no longer speaks. With
  SuperNode authentication (the default with TLS) it runs ``--enable-supernode-auth`` and ``serve`` registers
  each authorised node's public key (``flwr supernode register``) before the run: any other node is refused;
* one SuperNode per client (``flower-supernode --root-certificates ca.crt --node-config partition-id=<i>
  --auth-supernode-private-key node-<i>.key``), which runs our ClientApp in a fresh ``flwr-clientapp``
  process for every message;
* the run, submitted with ``flwr run APP CONNECTION --stream``: APP is a generated Flower App directory whose
  ``pyproject.toml`` names our ServerApp / ClientApp and carries the experiment config (YAML) in its run
  config; CONNECTION is a SuperLink connection in ``$FLWR_HOME/config.toml`` (address + root certificate).

``serve`` starts the SuperLink, submits the run, waits for its end and stops the SuperLink (with the
``flower-superexec`` / ``flwr-serverapp`` processes it started); the ServerApp waits for the SuperNodes.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import tomli_w

from fedaug.config.load import dump_yaml
from fedaug.config.schema import ExperimentConfig
from fedaug.errors import ConfigError, FedaugError
from fedaug.flower.certs import CertPaths, check_host
from fedaug.flower.server_app import CONFIG_KEY, FRESH_KEY, NODE_TIMEOUT_KEY
from fedaug.sweeps.workers import interrupt

logger = logging.getLogger(__name__)

CONNECTION = "fedaug"
"""Name of the SuperLink connection ``serve`` writes into its own ``$FLWR_HOME/config.toml``."""


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


REFUSED_MARKERS = ("[code: 2001]", "[code: 2004]")
"""Flower 1.41's SuperNode messages when the SuperLink refuses its key (auth on, key not registered)."""


def split_address(address: str, *, key: str = "address", listen: bool = False) -> tuple[str, int]:
    """``(host, port)`` of ``HOST:PORT`` (IPv6 as ``[::1]:9092``), both checked; ``key`` names the option."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"{key} must be HOST:PORT with a port in 1..65535, got {address!r}")
    check_host(host, key=key, listen=listen)
    return host, int(port)


def superlink_command(host: str, port: int, tls: CertPaths | None, *, node_auth: bool = False) -> list[str]:
    """``flower-superlink`` on ``host:port`` with TLS (or ``--insecure`` when ``tls`` is None); ``node_auth``:
    only registered SuperNodes may connect (``--enable-supernode-auth``)."""
    command = ["flower-superlink", "--host", host, "--port", str(port)]
    command.append("--disable-runtime-dependency-installation")  # never `uv sync` the app at run time
    if node_auth:
        command.append("--enable-supernode-auth")
    if tls is None:
        return [*command, "--insecure"]
    return [
        *command,
        *("--ssl-ca-certfile", str(tls.ca_cert)),
        *("--ssl-certfile", str(tls.server_cert)),
        *("--ssl-keyfile", str(tls.server_key)),
    ]


def supernode_command(
    superlink: str,
    partition_id: int,
    *,
    root_certificates: Path | None,
    runtime_port: int,
    data_dir: str | None = None,
    device: str | None = None,
    node_key: Path | None = None,
    state_dir: str | None = None,
) -> list[str]:
    """``flower-supernode`` holding client ``partition_id`` (``--insecure`` when no root certificate);
    ``device``: where its clients compute (node config ``device``, over the experiment's engine.device);
    ``node_key``: its private key for SuperNode authentication; ``state_dir``: where it keeps its client's
    state between rounds (node config ``state-dir``; default: the run dir as the node resolves it)."""
    node_config = f"partition-id={partition_id}"
    if data_dir:
        node_config += f' data-dir="{Path(data_dir).resolve()}"'
    if state_dir:
        node_config += f' state-dir="{Path(state_dir).resolve()}"'
    if device:
        node_config += f' device="{device}"'
    command = ["flower-supernode", "--superlink", superlink, "--node-config", node_config]
    command += ["--port", str(runtime_port)]  # the node's local Runtime API (its ClientApp processes)
    if node_key is not None:
        command += ["--auth-supernode-private-key", str(node_key)]
    if root_certificates is None:
        return [*command, "--insecure"]
    return [*command, "--root-certificates", str(root_certificates)]


def write_app(app_dir: Path, config: ExperimentConfig, *, fresh: bool, node_timeout: float) -> Path:
    """A Flower App directory (``pyproject.toml``) running ``config`` with our ServerApp and ClientApp."""
    from fedaug import __version__

    app_dir.mkdir(parents=True, exist_ok=True)
    pyproject: dict[str, Any] = {
        "build-system": {"requires": ["hatchling"], "build-backend": "hatchling.build"},
        "project": {
            "name": "fedaug-run",
            "version": __version__,
            "description": f"fedaug experiment {config.name!r} on Flower",
            "license": "MIT",
            "dependencies": [],
        },
        "tool": {
            "flwr": {
                "app": {
                    "publisher": "fedaug",
                    "components": {
                        "serverapp": "fedaug.flower.server_app:app",
                        "clientapp": "fedaug.flower.client_app:app",
                    },
                    "config": {
                        CONFIG_KEY: dump_yaml(config),
                        FRESH_KEY: fresh,
                        NODE_TIMEOUT_KEY: node_timeout,
                    },
                }
            }
        },
    }
    (app_dir / "pyproject.toml").write_text(tomli_w.dumps(pyproject))
    return app_dir


def write_connection(flwr_home: Path, address: str, root_certificates: Path | None) -> None:
    """``$FLWR_HOME/config.toml`` with the SuperLink connection :data:`CONNECTION` as the default."""
    connection: dict[str, Any] = {"address": address}
    if root_certificates is None:
        connection["insecure"] = True
    else:
        connection["root-certificates"] = str(root_certificates.resolve())
    flwr_home.mkdir(parents=True, exist_ok=True)
    config = {"superlink": {"default": CONNECTION, CONNECTION: connection}}
    (flwr_home / "config.toml").write_text(tomli_w.dumps(config))


def wait_for_port(host: str, port: int, process: subprocess.Popen[bytes], timeout: float) -> None:
    """Returns once ``host:port`` accepts connections; raises if ``process`` dies or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise FedaugError(f"the process serving {host}:{port} exited with code {process.returncode}")
        with socket.socket() as sock:
            sock.settimeout(1.0)
            if sock.connect_ex((host, port)) == 0:
                return
        time.sleep(0.5)
    raise FedaugError(f"nothing listens on {host}:{port} after {timeout:g}s")


def stop(process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """Stops ``process`` and the processes it started (its own session): SIGTERM, then SIGKILL."""
    if process.poll() is not None:
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=timeout)
            return
        except subprocess.TimeoutExpired:
            continue


def sigterm_as_interrupt() -> None:
    """SIGTERM raises KeyboardInterrupt from now on, so ``finally`` blocks stop the Flower processes started
    here (a sweep's version, :func:`fedaug.sweeps.workers.sigterm_as_interrupt`, holds only inside)."""
    signal.signal(signal.SIGTERM, interrupt)


@dataclasses.dataclass(frozen=True)
class ServeOptions:
    """How ``serve`` runs the SuperLink.

    Attributes:
        address: HOST:PORT the SuperLink listens on (SuperNodes and the flwr CLI connect here).
        tls: CA, server certificate and key (None: plain HTTP, ``--insecure``).
        node_keys: public keys of the SuperNodes allowed to join (registered before the run); empty: no
            SuperNode authentication (any node that reaches the SuperLink may join).
        fresh: discard existing run directories.
        node_timeout: seconds the ServerApp waits for all SuperNodes.
        work_dir: where the app, ``$FLWR_HOME`` and ``superlink.log`` go (None: a temporary folder).
    """

    address: str = "127.0.0.1:9092"
    tls: CertPaths | None = None
    node_keys: tuple[Path, ...] = ()
    fresh: bool = False
    node_timeout: float = 600.0
    work_dir: Path | None = None


def register_nodes(public_keys: tuple[Path, ...], env: dict[str, str]) -> None:
    """Registers each public key with the SuperLink of ``env``'s default connection (``flwr supernode
    register``, a few at a time); a FedaugError naming the first key that was not accepted."""
    flwr = shutil.which("flwr") or "flwr"

    def one(path: Path) -> subprocess.CompletedProcess[str]:
        command = [flwr, "supernode", "register", str(path.resolve()), CONNECTION]
        return subprocess.run(command, env=env, capture_output=True, text=True, check=False)

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(one, public_keys))
    for path, done in zip(public_keys, results, strict=True):
        if done.returncode != 0:
            detail = (done.stdout + done.stderr).strip().splitlines()
            reason = detail[-1] if detail else f"exit code {done.returncode}"
            raise FedaugError(f"the SuperLink did not register {path}: {reason}")
    logger.info("registered %d SuperNode public key(s)", len(public_keys))


def serve(config: ExperimentConfig, options: ServeOptions) -> int:
    """Starts a SuperLink, runs ``config`` on the SuperNodes that connect, stops it; flwr's exit code."""
    host, port = split_address(options.address)
    config = dataclasses.replace(config, out_dir=str(Path(config.out_dir).resolve()))
    work = options.work_dir or Path(tempfile.mkdtemp(prefix="fedaug-flower-"))
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "FLWR_HOME": str(work / "flwr-home")}
    local = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    write_connection(work / "flwr-home", f"{local}:{port}", options.tls.ca_cert if options.tls else None)
    app_dir = write_app(work / "app", config, fresh=options.fresh, node_timeout=options.node_timeout)
    log_path = work / "superlink.log"
    security = "TLS" if options.tls else "no TLS"
    nodes = f"{len(options.node_keys)} authorised SuperNode key(s)" if options.node_keys else "any node"
    logger.info("SuperLink on %s:%d (%s, %s); log %s", host, port, security, nodes, log_path)
    sigterm_as_interrupt()
    command = superlink_command(host, port, options.tls, node_auth=bool(options.node_keys))
    with open(log_path, "ab") as log:
        superlink = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        wait_for_port(local, port, superlink, timeout=120)
        if options.node_keys:
            register_nodes(options.node_keys, env)
        flwr = shutil.which("flwr") or "flwr"
        done = subprocess.run([flwr, "run", str(app_dir), CONNECTION, "--stream"], env=env, check=False)
        return done.returncode
    finally:
        stop(superlink)
        if options.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


def run_client(
    superlink: str,
    partition_id: int,
    *,
    root_certificates: Path | None,
    runtime_port: int | None = None,
    data_dir: str | None = None,
    device: str | None = None,
    node_key: Path | None = None,
    register_timeout: float = 120.0,
    state_dir: str | None = None,
) -> int:
    """Runs a SuperNode holding client ``partition_id`` until it is stopped (Ctrl-C); its exit code.

    With ``node_key``, a SuperNode the SuperLink refuses (its key not registered yet: ``serve`` registers
    the keys right after the SuperLink starts, and nodes started first may knock before that) is started
    again every 2 s for ``register_timeout`` seconds; after that a FedaugError says the key was refused.
    """
    command = supernode_command(
        superlink,
        partition_id,
        root_certificates=root_certificates,
        runtime_port=runtime_port or free_port(),
        data_dir=data_dir,
        device=device,
        node_key=node_key,
        state_dir=state_dir,
    )
    logger.info("%s", " ".join(command))
    sigterm_as_interrupt()
    deadline = time.monotonic() + register_timeout
    while True:
        code, refused = _supernode(command)
        if not refused or node_key is None:
            return code
        if time.monotonic() >= deadline:
            raise FedaugError(
                f"the SuperLink refused this node's key {node_key}: register its public key there "
                "('fedaug flower serve' registers every *.pub in --node-keys, default CERTS/nodes)"
            )
        logger.info("the SuperLink refused this node's key (not registered yet?); trying again in 2 s")
        time.sleep(2.0)


def _supernode(command: list[str]) -> tuple[int, bool]:
    """Runs one SuperNode, passing its output through; its exit code and whether the SuperLink refused it."""
    node = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    refused = threading.Event()

    def relay() -> None:
        assert node.stdout is not None
        for line in node.stdout:
            sys.stdout.buffer.write(line)
            sys.stdout.flush()
            if any(marker.encode() in line for marker in REFUSED_MARKERS):
                refused.set()

    relay_thread = threading.Thread(target=relay, daemon=True)
    relay_thread.start()
    try:
        code = node.wait()
        relay_thread.join(timeout=5)
        return code, refused.is_set()
    except KeyboardInterrupt:
        return 130, False
    finally:
        stop(node)
        sys.stdout.flush()
