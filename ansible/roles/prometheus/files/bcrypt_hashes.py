"""bcrypt hashes of the Prometheus web users' passwords, made on the host with its libcrypt.

Run by the prometheus role with the host's Python (no bcrypt or passlib needed
on the controller or the host). Reads JSON on stdin:

    {"users": {"name": "password", ...}, "existing": {"name": "$2b$...", ...}, "cost": 10}

and writes {"hashes": {"name": "$2b$...", ...}, "new": ["name", ...]} on stdout.
A user's existing hash is kept when it still matches the password (so a
second deployment changes nothing); every other user gets a fresh hash with
a random salt from libcrypt's crypt_gensalt (libxcrypt: Debian 10+, EL 8+).
Exit 1 with one line on stderr when the host cannot make bcrypt hashes or a
password is empty or longer than bcrypt's 72 bytes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import hmac
import json
import sys


def _libcrypt() -> ctypes.CDLL:
    for name in (ctypes.util.find_library("crypt"), "libcrypt.so.1", "libcrypt.so.2"):
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    raise RuntimeError("no libcrypt on this host")


def main() -> int:
    try:
        req = json.load(sys.stdin)
        lib = _libcrypt()
        lib.crypt.restype = ctypes.c_char_p
        lib.crypt.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        if not hasattr(lib, "crypt_gensalt"):
            raise RuntimeError("this libcrypt has no crypt_gensalt (bcrypt needs libxcrypt)")
        lib.crypt_gensalt.restype = ctypes.c_char_p
        lib.crypt_gensalt.argtypes = [ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p, ctypes.c_int]

        def crypt(password: bytes, setting: str) -> str:
            out = lib.crypt(password, setting.encode())
            return out.decode() if out else ""

        cost = int(req.get("cost", 10))
        existing = req.get("existing") or {}
        hashes: dict[str, str] = {}
        new: list[str] = []
        for user, password in sorted((req.get("users") or {}).items()):
            pw = str(password).encode()
            if not pw or len(pw) > 72:
                raise ValueError(f"user {user}: the password must be 1-72 bytes (bcrypt), got {len(pw)}")
            old = str(existing.get(user) or "")
            if old.startswith("$2") and hmac.compare_digest(crypt(pw, old), old):
                hashes[user] = old
                continue
            salt = lib.crypt_gensalt(b"$2b$", cost, None, 0)
            digest = crypt(pw, salt.decode()) if salt else ""
            if not digest.startswith("$2b$"):
                raise RuntimeError("libcrypt on this host cannot make bcrypt ($2b$) hashes")
            hashes[user] = digest
            new.append(user)
    except (RuntimeError, ValueError, TypeError, AttributeError) as e:
        print(f"bcrypt_hashes: {e}", file=sys.stderr)
        return 1
    json.dump({"hashes": hashes, "new": new}, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
