"""TLS certificates and SuperNode keys for a Flower deployment.

* A private CA and a server certificate signed by it: the SuperLink serves its APIs over HTTPS with
  ``server.pem`` / ``server.key``; SuperNodes and the ``flwr`` CLI verify it against ``ca.crt``
  (``--root-certificates``). The server certificate names every host the SuperNodes dial (Subject Alternative
  Names), e.g. ``127.0.0.1`` and ``localhost`` on one machine, or the server's DNS name / IP in a real
  deployment. This is the ``cryptography`` equivalent of Flower's ``generate.sh`` (openssl).
* One EC key pair per SuperNode (``nodes/node-<i>.key`` / ``.pub``, OpenSSH format, NIST P-384): Flower 1.41's
  SuperNode authentication. The SuperLink runs ``--enable-supernode-auth`` and accepts only the nodes whose
  public key was registered (``flwr supernode register``); a node proves it holds the private key
  (``flower-supernode --auth-supernode-private-key``).

Private keys are created with mode 0600 (never readable by others, not even for a moment) and replaced
atomically; an existing CA is never overwritten without ``force`` (every SuperNode trusting it would be
locked out).
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from fedaug.errors import ConfigError, FedaugError
from fedaug.validation import check_int

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
NODES_DIR = "nodes"
"""Sub-folder of a certificate folder holding the SuperNodes' key pairs."""

_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class CertPaths:
    """The files :func:`make_certificates` writes."""

    ca_cert: Path
    server_cert: Path
    server_key: Path


def check_host(host: str, *, key: str = "--host", listen: bool = False) -> str:
    """``host`` if it is an IP address or a DNS name (RFC 1123 labels); else a ConfigError naming it.

    ``listen``: also accept the wildcard addresses a server binds to (``0.0.0.0``, ``::``). IPv6 addresses
    may be bracketed (``[::1]``); the brackets are stripped.
    """
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        address = ipaddress.ip_address(bare)
    except ValueError:
        name = bare[:-1] if bare.endswith(".") else bare
        if 0 < len(name) <= 253 and all(_LABEL.match(label) for label in name.split(".")):
            return bare
        raise ConfigError(
            f"{key} must be an IP address or a DNS name (letters, digits, hyphens, dots), got {host!r}"
        ) from None
    if address.is_unspecified and not listen:
        raise ConfigError(f"{key} must name a reachable host, got the wildcard address {host!r}")
    return bare


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def write_private(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path``: mode 0600 from creation on, atomically (temp file, fsync, rename)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    write_private(path, pem)


def _san(hosts: tuple[str, ...]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def make_certificates(
    out_dir: Path, hosts: tuple[str, ...] = DEFAULT_HOSTS, days: int = 365, *, force: bool = False
) -> CertPaths:
    """Writes ``ca.crt``, ``ca.key``, ``server.pem`` and ``server.key`` into ``out_dir``.

    Args:
        out_dir: folder to write into (created).
        hosts: IP addresses and DNS names the server certificate is valid for.
        days: validity of both certificates.
        force: replace an existing CA (else a FedaugError naming it).
    """
    for host in hosts:
        check_host(host)
    if out_dir.exists() and not out_dir.is_dir():
        raise FedaugError(f"{out_dir} is a file, not a folder for certificates")
    existing = [out_dir / name for name in ("ca.crt", "ca.key") if (out_dir / name).exists()]
    if existing and not force:
        raise FedaugError(
            f"{existing[0]} exists: a new CA locks out every SuperNode that trusts the old one; "
            "pass --force to replace it"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key, server_key = _key(), _key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fedaug test CA")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(_san(hosts), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = CertPaths(out_dir / "ca.crt", out_dir / "server.pem", out_dir / "server.key")
    paths.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(ca_key, out_dir / "ca.key")
    paths.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    _write_key(server_key, paths.server_key)
    return paths


@dataclass(frozen=True)
class NodeKey:
    """One SuperNode's key pair: ``private`` goes to the node, ``public`` is registered on the SuperLink."""

    private: Path
    public: Path


def make_node_keys(out_dir: Path, count: int) -> list[NodeKey]:
    """Key pairs ``node-<i>.key`` / ``node-<i>.pub`` for i < count in ``out_dir``; existing pairs are kept.

    OpenSSH format, NIST P-384: what ``flower-supernode --auth-supernode-private-key`` and
    ``flwr supernode register`` read.
    """
    check_int("--nodes", count, 0)
    if out_dir.exists() and not out_dir.is_dir():
        raise FedaugError(f"{out_dir} is a file, not a folder for node keys")
    out_dir.mkdir(parents=True, exist_ok=True)
    keys = []
    for index in range(count):
        pair = NodeKey(out_dir / f"node-{index}.key", out_dir / f"node-{index}.pub")
        if not (pair.private.is_file() and pair.public.is_file()):
            key = ec.generate_private_key(ec.SECP384R1())
            private = key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()
            )
            public = key.public_key().public_bytes(
                serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
            )
            write_private(pair.private, private)
            pair.public.write_bytes(public + b"\n")
        keys.append(pair)
    return keys


def node_public_keys(folder: Path) -> list[Path]:
    """The SuperNode public keys (``*.pub``) in ``folder``, sorted; a FedaugError if there are none."""
    keys = sorted(folder.glob("*.pub")) if folder.is_dir() else []
    if not keys:
        raise FedaugError(
            f"SuperNode authentication is on but {folder} holds no public keys (*.pub): make them with "
            "'fedaug flower keys DIR --nodes K', or pass --no-node-auth"
        )
    for path in keys:
        try:
            key = serialization.load_ssh_public_key(path.read_bytes())
        except (ValueError, UnicodeDecodeError, UnsupportedAlgorithm) as exc:
            raise FedaugError(f"{path} is not an OpenSSH public key ({exc})") from None
        if not isinstance(key, ec.EllipticCurvePublicKey):
            raise FedaugError(f"{path} is not an EC public key (Flower needs a NIST curve, e.g. P-384)")
    return keys
