"""Per-pilot credentials: a short-lived JWT per glidein, signed by the factory, checked by the collector.

The factory holds an Ed25519 private key; the collector holds only the public
half, in a local JWKS file that its ``oidc`` authenticator reads
(``public_keys_file``: no issuer URL is ever fetched, and the file is re-read
when it changes, so keys rotate without a restart). Each glidein's token names
its cluster's trace (``gwms_trace_id``), entry and client, and expires with
the pilot (``lifetime``); the collector's gwmsguard processor drops any span of
another trace and sets the entry and client from the token. A token for the
factory itself or the exporter (which forwards spools it has already bound to
their glideins) names every trace (``*``).

Tokens travel as files, never in the job's environment or ClassAd: the
factory writes ``<token_dir>/<exp>-<trace id>/<proc>/gwms-trace.jwt`` and the
submit file transfers ``$ENV(GLIDEIN_TRACE_TOKEN_DIR)/$(Process)/gwms-trace.jwt``
into the glidein's sandbox, where gwms-trace.sh reads it once and deletes it.

Needs the ``cryptography`` package (the collector side needs nothing).

    python -m gwms_obs.tracing.credentials keygen /etc/gwms-factory/trace-key.pem /etc/otelcol-gwms/pilot-jwks.json
    python -m gwms_obs.tracing.credentials mint /etc/gwms-factory/trace-key.pem --service exporter --days 30
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

ISSUER: Final = "gwms-obs-factory"  # compared as a string by the collector, never fetched
AUDIENCE: Final = "gwms-obs-collector"
CLAIM_TRACE: Final = "gwms_trace_id"
CLAIM_ENTRY: Final = "gwms_entry"
CLAIM_CLIENT: Final = "gwms_client"
ANY_TRACE: Final = "*"
TOKEN_FILE: Final = "gwms-trace.jwt"  # name in the glidein's sandbox
ENV_TOKEN_DIR: Final = "GLIDEIN_TRACE_TOKEN_DIR"  # condor_submit's environment: where this cluster's tokens are
PILOT_LIFETIME: Final = 7 * 86400  # seconds: queue time plus the longest glidein
SERVICE_LIFETIME: Final = 30 * 86400


def _b64url(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def _load_private(path: str | os.PathLike[str]) -> Any:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return key


def _public_jwk(key: Any) -> dict[str, str]:
    from cryptography.hazmat.primitives import serialization

    raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    kid = _b64url(hashlib.sha256(raw).digest())[:16]
    return {"kty": "OKP", "crv": "Ed25519", "x": _b64url(raw), "alg": "EdDSA", "use": "sig", "kid": kid}


def generate_key(private_path: str | os.PathLike[str], jwks_path: str | os.PathLike[str]) -> dict[str, str]:
    """A new Ed25519 key (PEM, mode 0600) and its public JWK added to the JWKS file.

    Older keys stay in the JWKS, so tokens already issued still verify while a
    rotation is under way; remove them when those tokens have expired.
    """
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    _write(Path(private_path), pem, 0o600)
    jwk = _public_jwk(key)
    jwks_file = Path(jwks_path)
    keys: list[dict[str, str]] = []
    with contextlib.suppress(FileNotFoundError, ValueError, AttributeError):
        keys = [k for k in json.loads(jwks_file.read_text()).get("keys", []) if k.get("kid") != jwk["kid"]]
    _write(jwks_file, json.dumps({"keys": [*keys, jwk]}, indent=2).encode() + b"\n", 0o644)
    return jwk


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, path)


class PilotSigner:
    """Mints the collector's JWTs with the factory's private key."""

    def __init__(
        self,
        private_key: str | os.PathLike[str],
        *,
        issuer: str = ISSUER,
        audience: str = AUDIENCE,
        lifetime: float = PILOT_LIFETIME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._key = _load_private(private_key)
        self.kid = _public_jwk(self._key)["kid"]
        self.issuer = issuer
        self.audience = audience
        self.lifetime = lifetime
        self.clock = clock

    def mint(
        self, trace_id: str, *, subject: str, entry: str = "", client: str = "", lifetime: float | None = None
    ) -> str:
        now = int(self.clock())
        claims: dict[str, Any] = {
            "iss": self.issuer,
            "aud": self.audience,
            "sub": subject,
            "iat": now,
            "nbf": now - 60,  # clock skew between factory and collector hosts
            "exp": now + int(self.lifetime if lifetime is None else lifetime),
            CLAIM_TRACE: trace_id,
        }
        if entry:
            claims[CLAIM_ENTRY] = entry
        if client:
            claims[CLAIM_CLIENT] = client
        header = {"alg": "EdDSA", "typ": "JWT", "kid": self.kid}
        signing_input = (
            _b64url(json.dumps(header, separators=(",", ":")).encode())
            + "."
            + _b64url(json.dumps(claims, separators=(",", ":")).encode())
        )
        return signing_input + "." + _b64url(self._key.sign(signing_input.encode()))

    def mint_service(self, name: str, lifetime: float = SERVICE_LIFETIME) -> str:
        """A token for every trace: the factory's own spans, the exporter's forwarded spools."""
        return self.mint(ANY_TRACE, subject=f"service/{name}", lifetime=lifetime)

    def write_glidein_tokens(
        self, token_dir: str | os.PathLike[str], trace_id: str, count: int, *, entry: str, client: str
    ) -> Path:
        """One token file per glidein of a cluster: ``<dir>/<proc>/gwms-trace.jwt`` (0600, dirs 0700)."""
        exp = int(self.clock() + self.lifetime)
        base = Path(token_dir)
        base.mkdir(mode=0o700, parents=True, exist_ok=True)
        prune(base, self.clock())
        d = base / f"{exp}-{trace_id}"
        d.mkdir(mode=0o700)
        for proc in range(count):
            (d / str(proc)).mkdir(mode=0o700)
            token = self.mint(trace_id, subject=f"glidein/{trace_id}/{proc}", entry=entry, client=client)
            _write(d / str(proc) / TOKEN_FILE, token.encode() + b"\n", 0o600)
        return d


def prune(token_dir: str | os.PathLike[str], now: float) -> int:
    """Remove the token directories of clusters whose tokens have expired; how many went."""
    gone = 0
    with contextlib.suppress(FileNotFoundError):
        for d in Path(token_dir).iterdir():
            exp, _, _ = d.name.partition("-")
            if d.is_dir() and exp.isdigit() and int(exp) < now:
                shutil.rmtree(d, ignore_errors=True)
                gone += 1
    return gone


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gwms_obs.tracing.credentials", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    k = sub.add_parser("keygen", help="new Ed25519 key; its public half added to the collector's JWKS file")
    k.add_argument("private_key")
    k.add_argument("jwks")
    m = sub.add_parser("mint", help="print a token for every trace (the factory's or the exporter's)")
    m.add_argument("private_key")
    m.add_argument("--service", required=True, help="who holds it: factory, exporter")
    m.add_argument("--days", type=float, default=SERVICE_LIFETIME / 86400)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "keygen":
            jwk = generate_key(a.private_key, a.jwks)
            print(f"key {jwk['kid']}: private {a.private_key}, public added to {a.jwks}")
        else:
            if not a.days > 0:
                ap.error("--days must be > 0")
            print(PilotSigner(a.private_key).mint_service(a.service, a.days * 86400))
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
