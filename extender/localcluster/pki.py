"""Certificates for one local cluster: a CA, the API server's serving cert,
client certs for each component and the admin, and the service-account keys.

Files only; no process is started here.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Short-lived clusters; a year is plenty and avoids clock-skew surprises.
_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True)
class KeyPair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: KeyPair
    apiserver: KeyPair
    admin: KeyPair
    controller_manager: KeyPair
    scheduler: KeyPair
    extender: KeyPair  # serving cert for an HTTPS extender on 127.0.0.1
    service_account_key: Path
    service_account_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, org: str | None = None) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if org:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    return x509.Name(attrs)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)


def _make_ca(directory: Path) -> tuple[KeyPair, ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = _key()
    name = _name("gpuroster-local-ca")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    pair = KeyPair(directory / "ca.crt", directory / "ca.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair, key, cert


def _issue(
    directory: Path,
    stem: str,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    common_name: str,
    org: str | None = None,
    *,
    server: bool = False,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> KeyPair:
    key = _key()
    usage = [ExtendedKeyUsageOID.SERVER_AUTH] if server else [ExtendedKeyUsageOID.CLIENT_AUTH]
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name, org))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(_now())
        .not_valid_after(_now() + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usage), critical=False)
    )
    if dns or ips:
        alt: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    pair = KeyPair(directory / f"{stem}.crt", directory / f"{stem}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, pair.key)
    return pair


def create(directory: Path, service_ip: str = "10.0.0.1") -> Pki:
    """Write a complete PKI for one cluster into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca, ca_key, ca_cert = _make_ca(directory)
    apiserver = _issue(
        directory, "apiserver", ca_key, ca_cert, "kube-apiserver", server=True,
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"),
        ips=("127.0.0.1", service_ip),
    )
    admin = _issue(directory, "admin", ca_key, ca_cert, "gpuroster-admin", "system:masters")
    kcm = _issue(directory, "controller-manager", ca_key, ca_cert,
                 "system:kube-controller-manager")
    scheduler = _issue(directory, "scheduler", ca_key, ca_cert, "system:kube-scheduler")
    extender = _issue(directory, "extender", ca_key, ca_cert, "gpuroster-extender",
                      server=True, dns=("localhost",), ips=("127.0.0.1",))
    sa_key = _key()
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_key(sa_key, sa_key_path)
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return Pki(ca, apiserver, admin, kcm, scheduler, extender, sa_key_path, sa_pub_path)
