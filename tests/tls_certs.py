"""Throwaway TLS certificates for tests: a CA, a server certificate and a client certificate.

:func:`make_certs` writes, into a directory the test owns (``tmp_path``), PEM files::

    ca.pem                 self-signed CA (CA:TRUE, keyCertSign)
    server.pem, server.key the server's certificate, SAN IP 127.0.0.1 and DNS localhost
                           (``server_hosts``; extendedKeyUsage serverAuth), signed by the CA
    client.pem, client.key a client certificate for mutual TLS (CN ``client``,
                           extendedKeyUsage clientAuth), signed by the CA

Keys are EC P-256 (generated in microseconds, unlike RSA); private keys are PKCS#8, not
encrypted unless ``client_key_password`` is given (then ``client.key`` is encrypted with
it, for ``ssl_password``).  Certificates carry subject and authority key identifiers,
so they pass OpenSSL's strict X.509 checks too.  Valid from an hour ago for
``days`` days.  Used by the client TLS tests (``tests/clients/network``) and the
broker's TLS listener tests.

Needs the ``cryptography`` package (the ``test`` extra).  Cost: a few milliseconds.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["Certs", "make_certs"]


@dataclass(frozen=True)
class Certs:
    """Paths of the PEM files :func:`make_certs` wrote."""

    ca: Path  # ca.pem
    server_cert: Path  # server.pem
    server_key: Path  # server.key
    client_cert: Path  # client.pem
    client_key: Path  # client.key


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey, password: str | None) -> None:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password.encode()) if password
        else serialization.NoEncryption()
    )  # fmt: skip
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8, encryption))
    path.chmod(0o600)


def _issue(
    subject: str, key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey, usage: x509.ObjectIdentifier,
    sans: list[x509.GeneralName], days: int,
) -> x509.Certificate:  # fmt: skip
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=True, key_cert_sign=False, crl_sign=False,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()),
                       critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
            ca_key.public_key()), critical=False)
    )  # fmt: skip
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(ca_key, hashes.SHA256())


def make_certs(
    directory: Path, *, client_key_password: str | None = None, days: int = 30,
    ca_name: str = "minikafka test CA",
    server_hosts: Sequence[str] = ("127.0.0.1", "localhost"),
) -> Certs:  # fmt: skip
    """Write a fresh CA, server and client certificate into ``directory`` (created).

    ``server_hosts``: the server certificate's subject alternative names (IP addresses
    become IP entries, anything else DNS entries).
    """
    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    ca_key = _key()
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(ca_name))
        .issuer_name(_name(ca_name))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(
            digital_signature=True, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
            encipher_only=False, decipher_only=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    server_key, client_key = _key(), _key()
    server_cert = _issue(
        "server", server_key, ca_cert, ca_key, ExtendedKeyUsageOID.SERVER_AUTH,
        [_san(h) for h in server_hosts], days,
    )  # fmt: skip
    client_cert = _issue("client", client_key, ca_cert, ca_key,
                         ExtendedKeyUsageOID.CLIENT_AUTH, [], days)  # fmt: skip
    certs = Certs(directory / "ca.pem", directory / "server.pem", directory / "server.key",
                  directory / "client.pem", directory / "client.key")  # fmt: skip
    pem = serialization.Encoding.PEM
    certs.ca.write_bytes(ca_cert.public_bytes(pem))
    certs.server_cert.write_bytes(server_cert.public_bytes(pem))
    certs.client_cert.write_bytes(client_cert.public_bytes(pem))
    _write_key(certs.server_key, server_key, None)
    _write_key(certs.client_key, client_key, client_key_password)
    return certs
