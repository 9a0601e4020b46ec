"""A corpus of secret shapes, one in every place a span can hide one (issue 16, finding 6).

Used by the exporter's unit test, the pilot-library test and the live test
that sends it through the real collector into Jaeger. Each secret is a
distinctive string that must appear nowhere downstream.
"""

from __future__ import annotations

import base64
from typing import Any

JWT = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJKd3RTZWNyZXRTdWIifQ.U2lnSnd0U2VjcmV0U2ln"
PEM = "-----BEGIN PRIVATE KEY-----\nMIIPemSecretBody0123\n-----END PRIVATE KEY-----"

# The part of each secret that must never be seen again.
SECRETS = (
    "eyJzdWIiOiJKd3RTZWNyZXRTdWIifQ",  # JWT payload
    "BearerTokSecret01",
    "XyzUpperMark5",  # an upper-case "BEARER": the shell's fast path must not skip it
    "LowerPemMark6",  # a lower-case "-----begin ...-----"
    "hunter2Secret",
    "PassEq456Secret",
    "Sesame123Secret",
    "TokCli123Secret",
    "TokSecretArr1",
    "AKIAZZZZSECRET123456",
    "AwsSecretKv789",
    "PwdSecretGwms1",
    "PassphraseSecret7",
    "ScopeTokSecret5",
    "VersionPwSecret6",
    "MIIPemSecretBody0123",
    "UrlPassSecret9",
    "CN=Secret Person",
    "x509up_u4242",
    "ByteSecretBearer3",
    "LinkTokSecret8",
    "EventAttrSecret4",
    "9137731337",  # an int under a blocked key
    "ghp_SecretGithubToken0123456789abcdefABCD",
)


def _kv(k: str, v: Any) -> dict[str, Any]:
    return {"key": k, "value": v}


def _s(v: str) -> dict[str, str]:
    return {"stringValue": v}


def secret_request(trace_id: str, parent: str, resource: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One ExportTraceServiceRequest, two spans (root under ``parent``, a child), secrets everywhere."""
    root, child = "c0ffee0000000001", "c0ffee0000000002"
    t0 = 1781000000000000000
    spans = [
        {
            "traceId": trace_id, "spanId": root, "parentSpanId": parent, "kind": 5,
            # span name: a command line with a bearer header
            "name": f"curl -H Authorization: Bearer BearerTokSecret01 {JWT}",
            "startTimeUnixNano": str(t0), "endTimeUnixNano": str(t0 + 10**9),
            # status message
            "status": {"code": 2, "message": "login failed --password=PassEq456Secret for https://u:UrlPassSecret9@h/x"},
            "attributes": [
                _kv("gwms.phase", _s("setup")),
                # keys that are secrets whatever the value
                _kv("gwms.pwd", _s("PwdSecretGwms1")),
                _kv("passphrase", _s("PassphraseSecret7")),
                _kv("aws_access_key_id", _s("AKIAZZZZSECRET123456")),
                _kv("db.password", {"intValue": "9137731337"}),
                # values: a command line, an array command line, a kvlist, bytes, a DN, a PEM block
                _kv("process.command_line",
                    _s("run.sh --token TokCli123Secret --verbose -x password=hunter2Secret")),
                _kv("process.command_args",
                    {"arrayValue": {"values": [_s("run.sh"), _s("--token"), _s("TokSecretArr1")]}}),
                _kv("cloud", {"kvlistValue": {"values": [_kv("aws_secret_access_key", _s("AwsSecretKv789")),
                                                          _kv("note", _s(f"key {JWT}"))]}}),
                _kv("blob", {"bytesValue": base64.b64encode(b"Authorization: Bearer ByteSecretBearer3").decode()}),
                _kv("x.dn", _s("/DC=org/DC=cilogon/C=US/O=Fermilab/CN=Secret Person")),
                _kv("x.pem", _s(PEM)),
                _kv("x.proxy_file_path", _s("/tmp/x509up_u4242")),
                _kv("gh", _s("cloned with ghp_SecretGithubToken0123456789abcdefABCD")),
            ],
            "events": [
                {"timeUnixNano": str(t0 + 1), "name": "unlock passphrase=Sesame123Secret",
                 "attributes": [_kv("detail", _s("token=EventAttrSecret4"))]},
            ],
            "links": [
                {"traceId": "2" * 32, "spanId": "3" * 16,
                 "attributes": [_kv("auth", _s("Bearer LinkTokSecret8"))]},
            ],
        },
        {
            "traceId": trace_id, "spanId": child, "parentSpanId": root, "kind": 1, "name": "setup",
            "startTimeUnixNano": str(t0 + 1), "endTimeUnixNano": str(t0 + 2),
            "attributes": [_kv("gwms.phase", _s("setup"))],
        },
    ]  # fmt: skip
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": [*(resource or []), _kv("x509_user_proxy", _s("/tmp/x509up_u4242"))]},
                "scopeSpans": [
                    {
                        # scope name and version
                        "scope": {"name": "gwms --token ScopeTokSecret5", "version": "pw=1 password=VersionPwSecret6"},
                        "spans": spans,
                    }
                ],
            }
        ]
    }


def secret_spans(trace_id: str, parent: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(resource attributes, spans) of :func:`secret_request`, for callers that build their own request."""
    rs = secret_request(trace_id, parent)["resourceSpans"][0]
    return rs["resource"]["attributes"], rs["scopeSpans"][0]["spans"]
