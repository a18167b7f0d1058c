"""SuperNode authentication and the deployment's input checks: node keys, private-key modes, the CA that
is never silently replaced, host validation, the commands, and a SuperLink that refuses an unknown node."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("flwr")

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from fedaug.cli.main import main
from fedaug.errors import ConfigError, FedaugError
from fedaug.flower.certs import check_host, make_certificates, make_node_keys, node_public_keys
from fedaug.flower.deploy import (
    free_port,
    register_nodes,
    run_client,
    split_address,
    stop,
    superlink_command,
    supernode_command,
    wait_for_port,
    write_connection,
)

REPO = Path(__file__).resolve().parents[2]


def _private_modes(folder: Path) -> set[int]:
    return {stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*.key")}


def test_node_keys_are_openssh_p384_pairs_kept_on_rerun(tmp_path: Path) -> None:
    # Prepare / Execute
    keys = make_node_keys(tmp_path / "nodes", 2)
    first = [k.private.read_bytes() for k in keys]
    again = make_node_keys(tmp_path / "nodes", 3)
    # Assert: what flower-supernode and `flwr supernode register` read, one pair per node, existing kept
    assert [k.private.name for k in again] == ["node-0.key", "node-1.key", "node-2.key"]
    assert [k.private.read_bytes() for k in again[:2]] == first
    for pair in again:
        private = serialization.load_ssh_private_key(pair.private.read_bytes(), None)
        public = serialization.load_ssh_public_key(pair.public.read_bytes())
        assert isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name == "secp384r1"
        assert private.public_key().public_numbers() == public.public_numbers()  # type: ignore[union-attr]
    assert node_public_keys(tmp_path / "nodes") == [k.public for k in again]


def test_private_keys_are_0600_even_with_an_open_umask(tmp_path: Path) -> None:
    # Prepare
    old = os.umask(0)
    try:
        # Execute
        make_certificates(tmp_path)
        make_node_keys(tmp_path / "nodes", 2)
    finally:
        os.umask(old)
    # Assert: every private key is the owner's alone; certificates and public keys stay readable
    assert _private_modes(tmp_path) == {0o600}
    assert stat.S_IMODE((tmp_path / "ca.crt").stat().st_mode) & 0o044 == 0o044
    assert not list(tmp_path.rglob("*.tmp"))


def test_an_existing_ca_is_replaced_only_with_force(tmp_path: Path) -> None:
    # Prepare
    make_certificates(tmp_path)
    ca = (tmp_path / "ca.crt").read_bytes()
    # Execute / Assert
    with pytest.raises(FedaugError, match=r"ca.crt exists: .* pass --force"):
        make_certificates(tmp_path)
    assert (tmp_path / "ca.crt").read_bytes() == ca
    make_certificates(tmp_path, force=True)
    assert (tmp_path / "ca.crt").read_bytes() != ca


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "server.example.org", "::1", "[::1]", "a-b.c."])
def test_valid_hosts_pass(host: str) -> None:
    assert check_host(host) == host.strip("[]")


@pytest.mark.parametrize(
    "host", ["not a host!!", "", "-bad.org", "bad-.org", "a..b", "x" * 64, "a/b", "host:1", "0.0.0.0", "::"]
)
def test_invalid_hosts_are_refused_naming_the_value(host: str) -> None:
    with pytest.raises(ConfigError, match="--host must"):
        check_host(host)


def test_wildcards_are_accepted_only_to_listen_on() -> None:
    assert split_address("0.0.0.0:9092", listen=True) == ("0.0.0.0", 9092)
    assert split_address("[::]:9092", listen=True) == ("[::]", 9092)
    with pytest.raises(ConfigError, match="--superlink must name a reachable host"):
        split_address("0.0.0.0:9092", key="--superlink")
    for bad in ("h:0", "h:65536", "h:", ":9092", "h:x"):
        with pytest.raises(ConfigError, match=r"port in 1\.\.65535"):
            split_address(bad)


def test_public_keys_must_be_openssh_ec_keys(tmp_path: Path) -> None:
    # Prepare
    (tmp_path / "junk.pub").write_text("not a key\n")
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    # Execute / Assert
    with pytest.raises(FedaugError, match=r"junk\.pub is not an OpenSSH public key"):
        node_public_keys(tmp_path)
    (tmp_path / "junk.pub").write_bytes(
        rsa_key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    with pytest.raises(FedaugError, match=r"junk\.pub is not an EC public key"):
        node_public_keys(tmp_path)
    with pytest.raises(FedaugError, match="holds no public keys"):
        node_public_keys(tmp_path / "empty")


def test_commands_carry_supernode_authentication(tmp_path: Path) -> None:
    # Prepare
    paths = make_certificates(tmp_path)
    key = make_node_keys(tmp_path / "nodes", 1)[0].private
    # Execute
    link = superlink_command("127.0.0.1", 9092, paths, node_auth=True)
    open_link = superlink_command("127.0.0.1", 9092, paths)
    node = supernode_command("h:1", 0, root_certificates=paths.ca_cert, runtime_port=1, node_key=key)
    # Assert
    assert "--enable-supernode-auth" in link and "--enable-supernode-auth" not in open_link
    assert node[node.index("--auth-supernode-private-key") + 1] == str(key)


def _serve_options(monkeypatch: pytest.MonkeyPatch) -> list:
    seen: list = []

    def fake_serve(config, options):
        seen.append(options)
        raise FedaugError("stopped before the SuperLink")

    monkeypatch.setattr("fedaug.flower.deploy.serve", fake_serve)
    return seen


def test_serve_registers_the_certs_node_keys_by_default(
    tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Prepare
    monkeypatch.chdir(REPO)
    seen = _serve_options(monkeypatch)
    certs = tmp_path / "certs"
    assert main(["flower", "certs", str(certs), "--nodes", "2"]) == 0
    base = ["flower", "serve", "configs/smoke.yaml", "--certs", str(certs), "--out-dir", str(tmp_path)]
    # Execute / Assert: the smoke config has 6 clients, the folder 2 keys
    assert main(base) == 2
    err = capsys.readouterr().err
    assert f"6 clients need 6 SuperNodes, but {certs}/nodes holds 2 public keys" in err
    assert f"fedaug flower keys {certs} --nodes 6" in err
    assert main(["flower", "keys", str(certs), "--nodes", "6"]) == 0
    assert "4 new SuperNode key pair(s), 2 kept" in capsys.readouterr().out
    assert main(base) == 2 and [p.name for p in seen[-1].node_keys] == [f"node-{i}.pub" for i in range(6)]
    assert main([*base, "--no-node-auth"]) == 2 and seen[-1].node_keys == ()
    assert main([*base, "--address", "bad host!:1"]) == 2
    assert "--address must be an IP address or a DNS name" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ([], "give --node-key KEY"),
        (["--node-key", "nowhere.key"], "--node-key nowhere.key does not exist"),
        (["--no-node-auth", "--partition-id", "-1"], "--partition-id must be >= 0, got -1"),
    ],
)
def test_client_refuses_missing_keys(extra, message, capsys, tmp_path: Path) -> None:
    # Prepare
    make_certificates(tmp_path)
    argv = ["flower", "client", "--superlink", "127.0.0.1:1", "--root-certificates", str(tmp_path / "ca.crt")]
    if "--partition-id" not in extra:
        argv += ["--partition-id", "0"]
    # Execute
    code = main([*argv, *extra])
    # Assert
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_superlink_refuses_a_node_whose_key_is_not_registered(
    tmp_path: Path, capfd, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real SuperLink with authentication on: one key registered, a node holding another is refused."""
    # Prepare
    monkeypatch.setattr("fedaug.flower.deploy.sigterm_as_interrupt", lambda: None)  # pytest keeps its SIGTERM
    paths = make_certificates(tmp_path)
    known, unknown = make_node_keys(tmp_path / "nodes", 2)
    port = free_port()
    env = {**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home")}
    write_connection(tmp_path / "flwr-home", f"127.0.0.1:{port}", paths.ca_cert)
    command = superlink_command("127.0.0.1", port, paths, node_auth=True)
    with open(tmp_path / "superlink.log", "wb") as log:
        link = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        wait_for_port("127.0.0.1", port, link, timeout=120)
        register_nodes((known.public,), env)
        # Execute / Assert
        with pytest.raises(FedaugError, match=f"refused this node's key {unknown.private}"):
            run_client(
                f"127.0.0.1:{port}",
                1,
                root_certificates=paths.ca_cert,
                node_key=unknown.private,
                register_timeout=0,
            )
    finally:
        stop(link)
    assert "[code: 2004] Failed to activate SuperNode" in capfd.readouterr().out  # Flower 1.41's refusal
