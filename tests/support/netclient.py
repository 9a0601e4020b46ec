"""One HTTP/1.1 request, plain or TLS, from whatever network namespace this runs in; prints the outcome as JSON.

Run as a file (``ip netns exec NS python netclient.py '<json>'``) by the deploy
test, to talk to the nspawn host from a namespace of its own. The request is
written by hand on a socket so that the test controls every part of it: the
address to connect to, the TLS server name, the CA, an optional client
certificate, the headers. The outcome is {"status": int or null, "error": str
or null, "body": str}: a refused TLS handshake (no or wrong client
certificate) or a reset connection is an ``error`` with no status. With
``"h2": true`` it opens HTTP/2 instead, as a gRPC client does (see h2_settings).

    {"host": "192.0.2.1", "port": 9090, "method": "GET", "path": "/api/v1/query?query=up",
     "tls": true, "server_name": "gwms-host.test", "ca": "/path/ca.pem",
     "cert": null, "key": null, "headers": {"Authorization": "Basic ..."}, "body": ""}
"""

from __future__ import annotations

import json
import socket
import ssl
import sys
from typing import Any

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # + an empty SETTINGS frame


def h2_settings(req: dict[str, Any]) -> dict[str, Any]:
    """Open HTTP/2 over TLS (ALPN h2, as a gRPC client) and read the server's first frame.

    {"h2": true} when the server answered with its SETTINGS frame (it accepted
    the connection), else {"h2": false, "error": ...}.
    """
    try:
        ctx = ssl.create_default_context(cafile=req.get("ca"))
        ctx.set_alpn_protocols(["h2"])
        if req.get("cert"):
            ctx.load_cert_chain(req["cert"], req["key"])
        raw = socket.create_connection((req["host"], int(req["port"])), timeout=float(req.get("timeout", 10)))
        with raw, ctx.wrap_socket(raw, server_hostname=req.get("server_name") or req["host"]) as sock:
            sock.sendall(H2_PREFACE)
            head = sock.recv(9)
    except (OSError, ssl.SSLError) as e:
        return {"h2": False, "error": f"{type(e).__name__}: {e}"}
    if len(head) >= 4 and head[3] == 0x04:
        return {"h2": True, "error": None}
    return {"h2": False, "error": f"no SETTINGS frame: {head!r}"}


def request(req: dict[str, Any]) -> dict[str, Any]:
    body = str(req.get("body") or "").encode()
    timeout = float(req.get("timeout", 10))
    headers = {"Host": req.get("server_name") or req["host"], "Connection": "close", **(req.get("headers") or {})}
    if body or req.get("method", "GET") != "GET":
        headers.setdefault("Content-Type", "application/json")
        headers["Content-Length"] = str(len(body))
    head = f"{req.get('method', 'GET')} {req.get('path', '/')} HTTP/1.1\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    raw = b""
    try:
        sock: socket.socket = socket.create_connection((req["host"], int(req["port"])), timeout=timeout)
        with sock:
            if req.get("tls"):
                ctx = ssl.create_default_context(cafile=req.get("ca"))
                if req.get("cert"):
                    ctx.load_cert_chain(req["cert"], req["key"])
                sock = ctx.wrap_socket(sock, server_hostname=req.get("server_name") or req["host"])
            sock.sendall(head.encode() + body)
            while chunk := sock.recv(65536):
                raw += chunk
    except (OSError, ssl.SSLError) as e:
        if not raw:
            return {"status": None, "error": f"{type(e).__name__}: {e}", "body": ""}
    status_line, _, rest = raw.partition(b"\r\n")
    parts = status_line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return {"status": None, "error": f"no HTTP status in {raw[:200]!r}", "body": ""}
    head_bytes, _, payload = rest.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head_bytes.lower():
        payload = _dechunk(payload)
    return {"status": int(parts[1]), "error": None, "body": payload.decode(errors="replace")}


def _dechunk(data: bytes) -> bytes:
    out = b""
    while data:
        size_line, _, data = data.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, data = out + data[:size], data[size + 2 :]
    return out


if __name__ == "__main__":
    r = json.loads(sys.argv[1])
    json.dump(h2_settings(r) if r.get("h2") else request(r), sys.stdout)
