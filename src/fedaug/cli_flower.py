"""``fedaug flower ...``: the same experiments on Flower (imported lazily; ``pip install 'fedaug[flower]'``).

* ``fedaug flower simulate [CONFIG ...]``: Flower's simulation runtime, one SuperNode per client;
* ``fedaug flower certs DIR``: a CA and a server certificate for a TLS deployment;
* ``fedaug flower serve [CONFIG ...] --certs DIR``: a SuperLink that runs the experiment on the SuperNodes;
* ``fedaug flower client --superlink HOST:PORT --partition-id I --root-certificates ca.crt``: one SuperNode.

``simulate`` and ``serve`` take ``--device`` (short for ``--set engine.device=...``), checked on this machine
before Flower starts; ``client --device`` sets where one SuperNode's clients compute, over the experiment's
``engine.device`` (e.g. ``cuda:1`` for the second of a machine's SuperNodes).

Runs land in ``out_dir/<name>-flower/...`` (next to the in-process engine's ``out_dir/<name>/...``).
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fedaug.errors import ConfigError, FedaugError

if TYPE_CHECKING:
    from fedaug.experiments.config import ExperimentConfig
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
    from fedaug.cli import _load

    return _load(args, tag=SUFFIX)


def cmd_simulate(args: argparse.Namespace) -> int:
    require("flwr", "ray")
    from fedaug.experiments.runner import comparison_configs, comparison_table, run_dir_for
    from fedaug.flower.simulation import simulate

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
    print(f"\nFlower simulation, {configs[0].data.name}, {configs[0].model.name}, seed {configs[0].seed}:")
    print(comparison_table([(c.method.name, s) for c, s in zip(configs, summaries, strict=True)]))
    return 0


def cmd_certs(args: argparse.Namespace) -> int:
    require("cryptography")
    from fedaug.flower.certs import make_certificates

    paths = make_certificates(Path(args.out_dir), tuple(args.host or ("127.0.0.1", "localhost")))
    print(f"CA certificate (give to SuperNodes): {paths.ca_cert}")
    print(f"server certificate and key (SuperLink): {paths.server_cert} {paths.server_key}")
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


def cmd_serve(args: argparse.Namespace) -> int:
    require("flwr")
    from fedaug.device import resolve_device
    from fedaug.experiments.runner import comparison_configs, comparison_table, finished_summary, run_dir_for
    from fedaug.flower.deploy import ServeOptions, serve

    config = _load_flower(args)
    resolve_device(config.engine.device)  # the ServerApp's device: refused here, before the SuperLink starts
    options = ServeOptions(
        address=args.address,
        tls=_tls(args),
        fresh=args.fresh,
        node_timeout=args.node_timeout,
        work_dir=Path(args.work_dir) if args.work_dir else None,
    )
    code = serve(config, options)
    rows = []
    for sub in comparison_configs(config):
        run_dir = run_dir_for(sub)
        summary = finished_summary(run_dir, sub.train.rounds)
        if summary is None:
            raise FedaugError(f"the Flower run did not finish {sub.method.name} (flwr exit code {code})")
        rows.append((sub.method.name, summary))
        print(f"{sub.method.name}: run dir {run_dir}")
    print(comparison_table(rows))
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    require("flwr")
    from fedaug.device import resolve_device
    from fedaug.flower.deploy import run_client

    if args.device:  # refused here rather than in the first ClientApp process
        resolve_device(args.device, key="--device")
    if not args.insecure and not args.root_certificates:
        raise ConfigError("give --root-certificates CA_CERT (the SuperLink's CA) or --insecure")
    return run_client(
        args.superlink,
        args.partition_id,
        root_certificates=None if args.insecure else Path(args.root_certificates),
        runtime_port=args.runtime_port,
        data_dir=args.data_dir,
        device=args.device,
    )


def add_flower_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    add_config_args: Callable[[argparse.ArgumentParser], None],
) -> None:
    """Adds ``flower`` with its sub-commands; ``add_config_args`` adds the CONFIG / --set / ... arguments."""
    from fedaug.cli import add_device_arg  # called from fedaug.cli's build_parser: that module is loaded

    raw = argparse.RawDescriptionHelpFormatter
    flower = sub.add_parser(
        "flower",
        help="run on Flower: simulation, or a SuperLink and SuperNodes (TLS)",
        formatter_class=raw,
        epilog="examples:\n"
        "  fedaug flower simulate configs/smoke.yaml --num-cpus 2      # 6 synthetic clients, seconds\n"
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
        help="make a CA and a server certificate for TLS",
        formatter_class=raw,
        epilog="example:\n  fedaug flower certs certs --host 127.0.0.1 --host server.example.org",
    )
    certs.add_argument("out_dir", help="folder for ca.crt, ca.key, server.pem, server.key")
    certs.add_argument(
        "--host",
        action="append",
        help="IP or DNS name of the SuperLink (repeatable; default 127.0.0.1, localhost)",
    )
    certs.set_defaults(func=cmd_certs)

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
    serve.add_argument("--fresh", action="store_true", help="discard existing run dirs and start over")
    serve.add_argument(
        "--node-timeout", type=float, default=600.0, help="seconds to wait for all SuperNodes (default 600)"
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
        "--root-certificates certs/ca.crt",
    )
    client.add_argument("--superlink", required=True, help="the SuperLink's HOST:PORT")
    client.add_argument("--partition-id", type=int, required=True, help="the client id this node holds")
    client.add_argument("--root-certificates", help="the CA certificate that signed the SuperLink's")
    client.add_argument("--insecure", action="store_true", help="no TLS (the SuperLink runs --insecure)")
    client.add_argument("--data-dir", help="where this node's datasets live (default: the experiment's)")
    client.add_argument(
        "--runtime-port", type=int, help="local port for its ClientApp processes (default: free)"
    )
    client.add_argument(
        "--device",
        help="where this node's clients compute, over the experiment's engine.device: auto (a GPU if torch "
        "sees one, else cpu), cpu, cuda or cuda:N",
    )
    client.set_defaults(func=cmd_client)
