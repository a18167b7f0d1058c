"""``fedaug flower ...``: the same experiments on Flower (imported lazily; ``pip install 'fedaug[flower]'``).

* ``fedaug flower simulate [CONFIG ...]``: Flower's simulation runtime, one SuperNode per client;
* ``fedaug flower certs DIR``: a CA, a server certificate and SuperNode key pairs for a TLS deployment;
* ``fedaug flower keys DIR --nodes K``: more SuperNode key pairs, beside the existing ones;
* ``fedaug flower serve [CONFIG ...] --certs DIR``: a SuperLink that runs the experiment on the SuperNodes
  whose public keys are in ``DIR/nodes`` (SuperNode authentication; ``--no-node-auth`` turns it off);
* ``fedaug flower client --superlink HOST:PORT --partition-id I --root-certificates ca.crt --node-key K``: one
  SuperNode.

``simulate`` and ``serve`` take ``--device`` (short for ``--set engine.device=...``), checked on this machine
before Flower starts; ``client --device`` sets where one SuperNode's clients compute, over the experiment's
``engine.device`` (e.g. ``cuda:1`` for the second of a machine's SuperNodes).

Runs land in ``out_dir/<name>-flower/...`` (next to the in-process engine's ``out_dir/<name>/...``).
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug.errors import ConfigError, FedaugError
from fedaug.validation import check_int, flag_int, flag_number

if TYPE_CHECKING:
    from fedaug.config.schema import ExperimentConfig
    from fedaug.flower.certs import CertPaths

SUFFIX = "-flower"


def require(*modules: str) -> None:
    """Raises a one-line install hint when Flower (or its simulation backend) is missing."""
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise FedaugError(f"{' and '.join(missing)} not installed: pip install 'fedaug[flower]'")


def _load_flower(args: argparse.Namespace) -> ExperimentConfig:
    """The command line's config, named ``<name>-flower`` so its runs sit beside the engine's (a length
    override's segment follows: ``default-flower/train.rounds=3``)."""
    from fedaug.cli.common import load_config

    return load_config(args, tag=SUFFIX)


def cmd_simulate(args: argparse.Namespace) -> int:
    from fedaug.cli.common import preflight_config

    preflight_config(args)  # an unreadable file or a malformed --set: refused before Flower and torch
    require("flwr", "ray")
    from fedaug.flower.logs import quiet_flower
    from fedaug.runtime import startup

    quiet_flower(args.verbose)  # before Flower's modules are imported: alembic logs as they are
    from fedaug.cli.common import plot_job
    from fedaug.config.identity import run_dir_for
    from fedaug.flower.simulation import simulate
    from fedaug.runs.runner import comparison_configs, comparison_table

    startup.mark("flower_imports")

    configs = comparison_configs(_load_flower(args))
    summaries = simulate(
        configs,
        fresh=args.fresh,
        num_cpus=args.num_cpus,
        cpus_per_client=args.cpus_per_client,
        gpus_per_client=args.gpus_per_client,
    )
    for config in configs:
        print(f"{config.method.name}: run dir {run_dir_for(config)}")
    title = f"Flower simulation, {configs[0].data.name}, {configs[0].model.name}, seed {configs[0].seed}"
    plot_job(title, [(c.method.name, run_dir_for(c)) for c in configs], seed=configs[0].seed)
    print(f"\n{title}:")
    print(comparison_table([(c.method.name, s) for c, s in zip(configs, summaries, strict=True)]))
    return 0


def cmd_certs(args: argparse.Namespace) -> int:
    require("cryptography")
    from fedaug.flower.certs import DEFAULT_HOSTS, NODES_DIR, make_certificates, make_node_keys

    out = Path(args.out_dir)
    paths = make_certificates(out, tuple(args.host or DEFAULT_HOSTS), force=args.force)
    keys = make_node_keys(out / NODES_DIR, args.nodes)
    print(f"CA certificate (give to SuperNodes): {paths.ca_cert}")
    print(f"server certificate and key (SuperLink): {paths.server_cert} {paths.server_key}")
    if keys:
        nodes = out / NODES_DIR
        print(f"SuperNode keys: {nodes}/node-<i>.key (to node i only), {nodes}/node-<i>.pub (SuperLink)")
    return 0


def cmd_keys(args: argparse.Namespace) -> int:
    require("cryptography")
    from fedaug.flower.certs import NODES_DIR, make_node_keys

    folder = Path(args.out_dir) / NODES_DIR
    before = set(folder.glob("*.key")) if folder.is_dir() else set()
    keys = make_node_keys(folder, args.nodes)
    made = [k for k in keys if k.private not in before]
    print(f"{len(made)} new SuperNode key pair(s), {len(keys) - len(made)} kept, in {folder}")
    return 0


def _tls(args: argparse.Namespace) -> CertPaths | None:
    from fedaug.flower.certs import CertPaths

    if args.insecure:
        return None
    if args.certs:
        root = Path(args.certs)
        paths = CertPaths(root / "ca.crt", root / "server.pem", root / "server.key")
    elif args.ssl_certfile and args.ssl_keyfile and args.ssl_ca_certfile:
        paths = CertPaths(Path(args.ssl_ca_certfile), Path(args.ssl_certfile), Path(args.ssl_keyfile))
    else:
        raise ConfigError(
            "give --certs DIR (made by 'fedaug flower certs DIR'), the three --ssl-* files, or --insecure"
        )
    for path in (paths.ca_cert, paths.server_cert, paths.server_key):
        if not path.is_file():
            raise ConfigError(
                f"certificate file {path} does not exist (make them with 'fedaug flower certs')"
            )
    return paths


def _node_keys(args: argparse.Namespace, config: ExperimentConfig) -> tuple[Path, ...]:
    """The public keys ``serve`` registers: ``--node-keys``, else ``CERTS/nodes``; none with --no-node-auth
    (or --insecure without --node-keys)."""
    from fedaug.flower.certs import NODES_DIR, node_public_keys

    if args.no_node_auth:
        return ()
    if args.node_keys:
        folder = Path(args.node_keys)
    elif args.certs and not args.insecure:
        folder = Path(args.certs) / NODES_DIR
    elif args.insecure:
        return ()
    else:
        raise ConfigError("give --node-keys DIR (the SuperNodes' *.pub) or --no-node-auth")
    keys = tuple(node_public_keys(folder))
    needed = config.partition.num_clients
    if needed is not None and len(keys) < needed:
        raise ConfigError(
            f"{needed} clients need {needed} SuperNodes, but {folder} holds {len(keys)} public keys: "
            f"add them with 'fedaug flower keys {folder.parent} --nodes {needed}' (keeps the existing ones)"
        )
    return keys


def cmd_serve(args: argparse.Namespace) -> int:
    require("flwr")
    from fedaug.cli.common import plot_job
    from fedaug.config.identity import run_dir_for
    from fedaug.flower.deploy import ServeOptions, serve, split_address
    from fedaug.runs.resume import finished_summary
    from fedaug.runs.runner import comparison_configs, comparison_table
    from fedaug.runtime.device import resolve_device

    config = _load_flower(args)
    resolve_device(config.engine.device)  # the ServerApp's device: refused here, before the SuperLink starts
    split_address(args.address, key="--address", listen=True)
    options = ServeOptions(
        address=args.address,
        tls=_tls(args),
        node_keys=_node_keys(args, config),
        fresh=args.fresh,
        node_timeout=args.node_timeout,
        work_dir=Path(args.work_dir) if args.work_dir else None,
    )
    code = serve(config, options)
    rows, runs = [], []
    for sub in comparison_configs(config):
        run_dir = run_dir_for(sub)
        summary = finished_summary(run_dir, sub.train.rounds)
        if summary is None:
            raise FedaugError(f"the Flower run did not finish {sub.method.name} (flwr exit code {code})")
        rows.append((sub.method.name, summary))
        runs.append((sub.method.name, run_dir))
        print(f"{sub.method.name}: run dir {run_dir}")
    title = f"Flower deployment, {config.data.name}, {config.model.name}, seed {config.seed}"
    plot_job(title, runs, seed=config.seed)
    print(comparison_table(rows))
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    require("flwr")
    from fedaug.flower.deploy import run_client, split_address
    from fedaug.runtime.device import resolve_device

    if args.device:  # refused here rather than in the first ClientApp process
        resolve_device(args.device, key="--device")
    split_address(args.superlink, key="--superlink")
    check_int("--partition-id", args.partition_id, 0)
    if not args.insecure and not args.root_certificates:
        raise ConfigError("give --root-certificates CA_CERT (the SuperLink's CA) or --insecure")
    if not args.insecure and not args.no_node_auth and not args.node_key:
        raise ConfigError(
            "give --node-key KEY (this node's private key, e.g. certs/nodes/node-<i>.key) or --no-node-auth"
        )
    node_key = None if args.no_node_auth or not args.node_key else Path(args.node_key)
    if node_key is not None and not node_key.is_file():
        raise ConfigError(f"--node-key {node_key} does not exist (make keys with 'fedaug flower certs')")
    return run_client(
        args.superlink,
        args.partition_id,
        root_certificates=None if args.insecure else Path(args.root_certificates),
        runtime_port=args.runtime_port,
        data_dir=args.data_dir,
        device=args.device,
        node_key=node_key,
        register_timeout=args.register_timeout,
        state_dir=args.state_dir,
    )


def add_flower_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Adds ``flower`` with its sub-commands."""
    from fedaug.cli.common import add_config_args, add_device_arg

    raw = argparse.RawDescriptionHelpFormatter
    flower = sub.add_parser(
        "flower",
        help="run on Flower: simulation, or a SuperLink and SuperNodes (TLS)",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug flower simulate smoke --num-cpus 2                   # 6 synthetic clients, seconds\n"
        "  fedaug flower serve --certs certs --address 0.0.0.0:9092 --method flea",
    )
    commands = flower.add_subparsers(dest="flower_command", required=True, metavar="COMMAND")

    sim = commands.add_parser(
        "simulate",
        help="the experiment in Flower's simulation runtime",
        formatter_class=raw,
        epilog="example:\n  fedaug flower simulate --method flea --set train.rounds=3 --num-cpus 1",
    )
    add_config_args(sim)
    sim.add_argument("--fresh", action="store_true", help="discard existing run dirs and start over")
    sim.add_argument("--num-cpus", type=int, help="CPUs for Flower's Ray backend (default: all)")
    sim.add_argument("--cpus-per-client", type=float, default=1.0, help="CPUs per ClientApp (default 1)")
    sim.add_argument(
        "--gpus-per-client",
        type=float,
        default=0.0,
        help="share of a GPU reserved per ClientApp, e.g. 0.25: at most 4 clients on one GPU at a time "
        "(default 0: none reserved; clients still use a visible GPU when engine.device is auto or cuda)",
    )
    add_device_arg(sim)
    sim.set_defaults(func=cmd_simulate)

    certs = commands.add_parser(
        "certs",
        help="make a CA, a server certificate and SuperNode keys",
        formatter_class=raw,
        epilog="example:\n  fedaug flower certs certs --host 127.0.0.1 --host server.example.org --nodes 3",
    )
    certs.add_argument("out_dir", help="folder for ca.crt, ca.key, server.pem, server.key and nodes/")
    certs.add_argument(
        "--host",
        action="append",
        help="IP or DNS name of the SuperLink (repeatable; default 127.0.0.1, localhost)",
    )
    certs.add_argument(
        "--nodes",
        type=int,
        default=3,
        help="SuperNode key pairs to make in OUT_DIR/nodes, one per client (default %(default)s)",
    )
    certs.add_argument("--force", action="store_true", help="replace an existing CA (old nodes lose trust)")
    certs.set_defaults(func=cmd_certs)

    keys = commands.add_parser(
        "keys",
        help="add SuperNode key pairs beside existing ones",
        formatter_class=raw,
        epilog="example:\n  fedaug flower keys certs --nodes 75     # certs/nodes/node-0..74.key/.pub",
    )
    keys.add_argument("out_dir", help="the certificate folder (keys go to OUT_DIR/nodes)")
    keys.add_argument("--nodes", type=int, required=True, help="how many key pairs there should be in all")
    keys.set_defaults(func=cmd_keys)

    serve = commands.add_parser(
        "serve",
        help="start a SuperLink and run the experiment on its SuperNodes",
        formatter_class=raw,
        epilog="example:\n"
        "  fedaug flower serve --certs certs --address 0.0.0.0:9092 --set partition.num_clients=3",
    )
    add_config_args(serve)
    serve.add_argument(
        "--address", default="127.0.0.1:9092", help="HOST:PORT to listen on (default %(default)s)"
    )
    serve.add_argument("--certs", help="folder with ca.crt, server.pem, server.key (fedaug flower certs)")
    serve.add_argument("--ssl-ca-certfile", help="CA certificate (instead of --certs)")
    serve.add_argument("--ssl-certfile", help="server certificate (instead of --certs)")
    serve.add_argument("--ssl-keyfile", help="server private key (instead of --certs)")
    serve.add_argument("--insecure", action="store_true", help="no TLS (plain HTTP; trusted networks only)")
    serve.add_argument(
        "--node-keys",
        help="folder of the SuperNodes' public keys (*.pub) allowed to join (default: CERTS/nodes)",
    )
    serve.add_argument(
        "--no-node-auth",
        action="store_true",
        help="no SuperNode authentication: any node that reaches the SuperLink may join",
    )
    serve.add_argument("--fresh", action="store_true", help="discard existing run dirs and start over")
    serve.add_argument(
        "--node-timeout",
        type=flag_number(0, low_open=True),
        default=600.0,
        help="seconds to wait for all SuperNodes (default 600)",
    )
    serve.add_argument("--work-dir", help="keep the Flower app, FLWR_HOME and superlink.log here")
    add_device_arg(serve)
    serve.set_defaults(func=cmd_serve)

    client = commands.add_parser(
        "client",
        help="start a SuperNode holding one client's partition",
        formatter_class=raw,
        epilog="example:\n"
        "  fedaug flower client --superlink server.example.org:9092 --partition-id 0 "
        "--root-certificates certs/ca.crt --node-key certs/nodes/node-0.key",
    )
    client.add_argument("--superlink", required=True, help="the SuperLink's HOST:PORT")
    client.add_argument("--partition-id", type=int, required=True, help="the client id this node holds")
    client.add_argument("--root-certificates", help="the CA certificate that signed the SuperLink's")
    client.add_argument("--insecure", action="store_true", help="no TLS (the SuperLink runs --insecure)")
    client.add_argument("--node-key", help="this node's private key (certs/nodes/node-<i>.key)")
    client.add_argument(
        "--no-node-auth", action="store_true", help="no node key (the SuperLink runs --no-node-auth)"
    )
    client.add_argument(
        "--register-timeout",
        type=flag_number(0),
        default=120.0,
        help="seconds to keep knocking while the SuperLink refuses this node's key (default %(default)s)",
    )
    client.add_argument("--data-dir", help="where this node's datasets live (default: the experiment's)")
    client.add_argument(
        "--state-dir",
        help="where this node keeps its client's state between rounds (SCAFFOLD, FedDyn, MOON, local; "
        "default: client_state/ in the run dir as this node resolves it)",
    )
    client.add_argument(
        "--runtime-port",
        type=flag_int(1, 65535),
        help="local port for its ClientApp processes (default: free)",
    )
    client.add_argument(
        "--device",
        help="where this node's clients compute, over the experiment's engine.device: auto (a GPU if torch "
        "sees one, else cpu), cpu, cuda or cuda:N",
    )
    client.set_defaults(func=cmd_client)
