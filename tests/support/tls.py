"""A throwaway PKI for the deploy test: a site CA, a server certificate, a client certificate, and a stranger.

What an operator puts in Ansible Vault for the multi-host inventory
(vault.yml.example): the CA that signs the monitoring host's certificate
(serverAuth, subjectAltName = its inventory name) and the collectors' client
certificate (clientAuth). ``rogue_*`` is a client certificate from another
CA, which Jaeger's mutual TLS must refuse. Keys are ECDSA P-256 (fast to make),
PEM, PKCS#8; everything is valid from an hour ago for two days.
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


@dataclass
class Pki:
    dir: Path
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    rogue_cert: str
    rogue_key: str

    def path(self, name: str) -> Path:
        """The PEM file of ``name`` (ca, server_cert, client_key, ...), written by make_pki."""
        return self.dir / f"{name}.pem"


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(k: ec.EllipticCurvePrivateKey) -> str:
    return k.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def _cert(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    eku: x509.ObjectIdentifier | None = None,
    sans: list[x509.GeneralName] | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        b = b.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        b = b.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    if eku is not None:
        b = b.add_extension(x509.ExtendedKeyUsage([eku]), critical=False)
    if sans:
        b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem(c: x509.Certificate) -> str:
    return c.public_bytes(serialization.Encoding.PEM).decode()


def make_pki(dest: Path, server_name: str, server_ip: str) -> Pki:
    dest.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca = _cert("gwms-obs test site CA", ca_key, None, ca_key, ca=True)
    server_key = _key()
    server = _cert(
        server_name,
        server_key,
        ca,
        ca_key,
        eku=ExtendedKeyUsageOID.SERVER_AUTH,
        sans=[x509.DNSName(server_name), x509.IPAddress(ipaddress.ip_address(server_ip))],
    )
    client_key = _key()
    client = _cert("otelcol-gwms", client_key, ca, ca_key, eku=ExtendedKeyUsageOID.CLIENT_AUTH)
    rogue_ca_key = _key()
    rogue_ca = _cert("someone else's CA", rogue_ca_key, None, rogue_ca_key, ca=True)
    rogue_key = _key()
    rogue = _cert("otelcol-gwms", rogue_key, rogue_ca, rogue_ca_key, eku=ExtendedKeyUsageOID.CLIENT_AUTH)
    pki = Pki(
        dir=dest,
        ca=_pem(ca),
        server_cert=_pem(server),
        server_key=_pem_key(server_key),
        client_cert=_pem(client),
        client_key=_pem_key(client_key),
        rogue_cert=_pem(rogue),
        rogue_key=_pem_key(rogue_key),
    )
    for field in ("ca", "server_cert", "server_key", "client_cert", "client_key", "rogue_cert", "rogue_key"):
        p = pki.path(field)
        p.write_text(getattr(pki, field))
        p.chmod(0o600)
    return pki
