"""Deployment pieces: certificates, the generated Flower App and connection, the commands, CLI errors."""

from __future__ import annotations

import importlib.util
import json
import socket
import ssl
import threading
from pathlib import Path

import pytest
import yaml

pytest.importorskip("flwr")

from fedaug.cli import flower as cli_flower
from fedaug.cli.main import main
from fedaug.config.identity import run_dir_for
from fedaug.config.load import config_from_dict, load_config
from fedaug.flower.certs import make_certificates
from fedaug.flower.deploy import superlink_command, supernode_command, write_app, write_connection
from fedaug.flower.server_app import CONFIG_KEY, FRESH_KEY, NODE_TIMEOUT_KEY

REPO = Path(__file__).resolve().parents[2]


def _handshake(paths, hostname: str) -> bytes:
    """A TLS server with the server certificate; a client that trusts only the CA connects as ``hostname``."""
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(paths.server_cert, paths.server_key)
    client = ssl.create_default_context(cafile=str(paths.ca_cert))
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer() -> None:
            conn, _ = listener.accept()
            try:
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except ssl.SSLError:  # the client refused the certificate
                conn.close()

        thread = threading.Thread(target=answer)
        thread.start()
        port = listener.getsockname()[1]
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client.wrap_socket(raw, server_hostname=hostname) as tls,
        ):
            data = tls.recv(2)
        thread.join()
    return data


@pytest.mark.parametrize("hostname", ["127.0.0.1", "localhost"])
def test_certificates_pass_a_tls_handshake(tmp_path: Path, hostname: str) -> None:
    """The server certificate chains to the CA and is valid for 127.0.0.1 and localhost."""
    # Prepare
    paths = make_certificates(tmp_path, ("127.0.0.1", "localhost"))
    # Execute / Assert
    assert _handshake(paths, hostname) == b"ok"
    assert (tmp_path / "server.key").stat().st_mode & 0o077 == 0


def test_certificates_are_refused_for_other_names(tmp_path: Path) -> None:
    # Prepare
    paths = make_certificates(tmp_path, ("10.1.2.3",))
    # Execute / Assert
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(paths, "127.0.0.1")


def test_generated_app_is_a_valid_flower_app_carrying_the_config(tmp_path: Path) -> None:
    # Prepare
    from flwr.cli.config_utils import load_and_validate

    config = load_config([REPO / "configs" / "smoke.yaml"], ["method=flea", "compare=[fedavg, flea]"])
    # Execute
    app_dir = write_app(tmp_path / "app", config, fresh=True, node_timeout=42.0)
    parsed, warnings = load_and_validate(app_dir / "pyproject.toml")
    # Assert
    assert warnings == []
    components = parsed["tool"]["flwr"]["app"]["components"]
    assert components == {
        "serverapp": "fedaug.flower.server_app:app",
        "clientapp": "fedaug.flower.client_app:app",
    }
    run_config = parsed["tool"]["flwr"]["app"]["config"]
    assert config_from_dict(yaml.safe_load(run_config[CONFIG_KEY])) == config
    assert run_config[FRESH_KEY] is True and run_config[NODE_TIMEOUT_KEY] == 42.0


def test_connection_is_read_by_the_flwr_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    from flwr.cli.flower_config import read_superlink_connection

    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    (tmp_path / "ca.crt").write_text("x")
    # Execute
    write_connection(tmp_path, "127.0.0.1:9092", tmp_path / "ca.crt")
    connection = read_superlink_connection()
    # Assert
    assert connection.address == "127.0.0.1:9092"
    assert Path(connection.root_certificates).resolve() == (tmp_path / "ca.crt").resolve()


def test_commands_use_tls_unless_insecure(tmp_path: Path) -> None:
    # Prepare
    paths = make_certificates(tmp_path)
    # Execute
    link = superlink_command("127.0.0.1", 9092, paths)
    node = supernode_command("127.0.0.1:9092", 2, root_certificates=paths.ca_cert, runtime_port=9999)
    plain = supernode_command("h:1", 0, root_certificates=None, runtime_port=1, data_dir=str(tmp_path))
    # Assert
    assert link[:5] == ["flower-superlink", "--host", "127.0.0.1", "--port", "9092"]
    assert "--insecure" not in link and link[-2:] == ["--ssl-keyfile", str(paths.server_key)]
    assert "--disable-runtime-dependency-installation" in link
    assert node[node.index("--node-config") + 1] == "partition-id=2"
    assert node[-2:] == ["--root-certificates", str(paths.ca_cert)]
    assert plain[-1] == "--insecure" and f'data-dir="{tmp_path.resolve()}"' in plain[4]


def test_a_nodes_state_dir_becomes_its_node_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``fedaug flower client --state-dir DIR``: the node keeps its client's state there (absolute)."""
    # Prepare
    monkeypatch.chdir(tmp_path)
    # Execute
    node = supernode_command("h:1", 4, root_certificates=None, runtime_port=1, state_dir="node-state")
    # Assert
    expected = f'partition-id=4 state-dir="{tmp_path.resolve() / "node-state"}"'
    assert node[node.index("--node-config") + 1] == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["flower", "serve", "configs/smoke.yaml"], "give --certs DIR"),
        (["flower", "serve", "configs/smoke.yaml", "--certs", "nowhere"], "nowhere/ca.crt does not exist"),
        (["flower", "client", "--superlink", "h:1", "--partition-id", "0"], "give --root-certificates"),
    ],
)
def test_cli_errors_are_one_line(argv, message, capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # Prepare
    monkeypatch.chdir(REPO)
    # Execute
    code = main(argv)
    # Assert
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_missing_flower_gives_the_install_hint(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    # Prepare
    monkeypatch.setattr(cli_flower.importlib.util, "find_spec", lambda name: None)
    # Execute
    code = main(["flower", "simulate", "configs/smoke.yaml"])
    # Assert
    assert code == 2
    assert "flwr and ray not installed: pip install 'fedaug[flower]'" in capsys.readouterr().err


def test_simulate_command_runs_each_compared_method_as_name_flower(monkeypatch, capsys, tmp_path) -> None:
    """The CLI hands Flower's simulation one config per compared method, named ``<name>-flower``."""
    # Prepare
    import fedaug.flower.simulation as simulation

    seen = {}

    def fake_simulate(configs, **kwargs):
        seen["configs"], seen["kwargs"] = configs, kwargs
        for config in configs:  # one logged round each, for the job's figure
            run_dir_for(config).mkdir(parents=True)
            (run_dir_for(config) / "metrics.jsonl").write_text('{"round": 1, "test/acc": 0.5}\n')
        return [{"best_acc": 0.5, "best_round": 1, "last10_acc": 0.5, "final_acc": 0.5} for _ in configs]

    monkeypatch.setattr(simulation, "simulate", fake_simulate)
    monkeypatch.chdir(REPO)
    # Execute
    argv = ["flower", "simulate", "configs/smoke.yaml", "--set", "compare=[fedavg, flea]", "--num-cpus", "1"]
    code = main([*argv, "--out-dir", str(tmp_path)])
    # Assert
    assert code == 0
    assert [(c.name, c.method.name) for c in seen["configs"]] == [
        ("smoke-flower", "fedavg"),
        ("smoke-flower", "flea"),
    ]
    assert seen["kwargs"] == {"fresh": False, "num_cpus": 1, "cpus_per_client": 1.0, "gpus_per_client": 0.0}
    out = capsys.readouterr().out
    assert "smoke-flower" in out
    if importlib.util.find_spec("matplotlib") is not None:  # the same figure as fedaug run's
        setting = run_dir_for(seen["configs"][0]).parents[1]
        assert f"curves: {setting / 'curves_seed0_fedavg_flea.png'}\n" in out


def test_serve_reports_only_runs_finished_with_the_configs_rounds(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare: no SuperLink is started; the run dir holds a summary of a 2-round run of the 3-round config
    monkeypatch.chdir(REPO)
    monkeypatch.setattr("fedaug.flower.deploy.serve", lambda config, options: 1)
    config = load_config([REPO / "configs/smoke.yaml"], [f"out_dir={tmp_path}", "name=smoke-flower"])
    run = run_dir_for(config)
    run.mkdir(parents=True)
    summary = {"best_acc": 0.5, "best_round": 2, "last10_acc": 0.5, "final_acc": 0.5}
    argv = ["flower", "serve", "configs/smoke.yaml", "--insecure", "--out-dir", str(tmp_path)]
    # Execute / Assert: a summary of other rounds is not this run's result
    (run / "summary.json").write_text(json.dumps({**summary, "rounds": 2}))
    assert main(argv) == 2
    assert "did not finish fedavg" in capsys.readouterr().err
    (run / "summary.json").write_text(json.dumps({**summary, "rounds": 3}))
    assert main(argv) == 0
    assert "50.00" in capsys.readouterr().out
