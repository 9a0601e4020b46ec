"""A mail sink: SMTP in, a small JSON API out (the subset of Mailpit's the tests read).

The offline compose variant runs it as its ``mail`` service (Debian's
python3-aiosmtpd, no registry image), so it imports only the standard
library and aiosmtpd; tests/support/servers.py runs the same store in
process. What it keeps is what a test asserts on: the envelope recipients
(who was really mailed, whatever the headers say), the subject and the plain
body.

    GET /api/v1/messages    {"total": N, "messages": [{"ID", "To": [{"Address"}], "Subject"}]}
    GET /api/v1/message/ID  {"ID", "To", "Subject", "Text"}
    GET /readyz             200 once both servers listen

    python3 mailsink.py --smtp 0.0.0.0:1025 --http 0.0.0.0:8025
"""

from __future__ import annotations

import argparse
import dataclasses
import email
import email.policy
import json
import signal
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_MAILS = 10_000  # a sink that runs for days keeps the newest, not all


@dataclasses.dataclass(frozen=True)
class Mail:
    rcpt_tos: tuple[str, ...]
    subject: str
    body: str


class MailStore:
    """aiosmtpd's handler: envelope and message stored together under one lock, so a reader
    never sees half a delivery."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._mails: list[Mail] = []

    async def handle_DATA(self, server: object, session: object, envelope: Any) -> str:
        msg = email.message_from_bytes(envelope.content, policy=email.policy.default)
        part = msg.get_body(preferencelist=("plain", "html"))
        body = part.get_content() if part is not None else ""
        with self._lock:
            self._mails.append(Mail(tuple(envelope.rcpt_tos), str(msg["Subject"]), body))
            del self._mails[:-MAX_MAILS]
        return "250 OK"

    def mails(self) -> list[Mail]:
        with self._lock:
            return list(self._mails)


def _summary(i: int, m: Mail) -> dict[str, Any]:
    return {"ID": str(i), "To": [{"Address": a} for a in m.rcpt_tos], "Subject": m.subject}


def http_handler(store: MailStore) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            mails = store.mails()
            doc: Any
            if self.path == "/readyz":
                doc = {"ok": True}
            elif self.path.split("?")[0] == "/api/v1/messages":
                doc = {"total": len(mails), "messages": [_summary(i, m) for i, m in enumerate(mails)]}
            elif self.path.startswith("/api/v1/message/") and self.path.rsplit("/", 1)[1].isdigit():
                i = int(self.path.rsplit("/", 1)[1])
                if i >= len(mails):
                    return self.send_error(404)
                doc = {**_summary(i, mails[i]), "Text": mails[i].body}
            else:
                return self.send_error(404)
            body = json.dumps(doc).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a poll every second would drown the container's log

    return Handler


def _addr(s: str) -> tuple[str, int]:
    host, _, port = s.rpartition(":")
    return host or "0.0.0.0", int(port)


def main(argv: list[str] | None = None) -> int:
    from aiosmtpd.controller import Controller

    p = argparse.ArgumentParser(description="SMTP sink with a JSON API")
    p.add_argument("--smtp", default="127.0.0.1:1025", type=_addr, help="HOST:PORT to receive mail on")
    p.add_argument("--http", default="127.0.0.1:8025", type=_addr, help="HOST:PORT of the JSON API")
    a = p.parse_args(argv)
    store = MailStore()
    smtp = Controller(store, hostname=a.smtp[0], port=a.smtp[1])
    smtp.start()
    http = ThreadingHTTPServer(a.http, http_handler(store))
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=http.shutdown).start())
    print(f"mailsink: SMTP on {a.smtp[0]}:{a.smtp[1]}, API on http://{a.http[0]}:{a.http[1]}", flush=True)
    try:
        http.serve_forever()
    finally:
        smtp.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
