"""Which frontend each factory-side user is: the ``client`` label of a pilot.

A pilot's files are under ``client/user_<name>/``: the factory's username, not
the frontend's ``client_log_name`` the accounting is labelled with. The name
comes from the exporter's ``[clients]`` table, else from the completed_jobs
lines, which write both (``client="..." username="..."``); learned names are
checkpointed (``client_by_user``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ..parse_errors import ParseErrors


class FrontendNames:
    def __init__(self, configured: dict[str, str]) -> None:
        self.configured = configured  # [clients]: username -> client_log_name, wins over what lines show
        self.learned: dict[str, str] = {}  # username -> client_log_name, from completed_jobs lines
        self.unmapped: set[str] = set()  # listed users with no frontend name yet (looked for in lines)

    def of(self, username: str) -> str | None:
        """The frontend's client_log_name for a factory-side username, if the factory has shown it."""
        return self.configured.get(username) or self.learned.get(username)

    def label(self, username: str, errors: ParseErrors, source: str, path: str) -> str:
        """The client label of a pilot of ``username``: its name, else ``user_<name>``, counted and logged."""
        name = self.of(username)
        if name is None:
            errors.record(source, "unmapped_client", path, None, f"no frontend name known for user_{username}")
            return f"user_{username}"
        return name

    def listed(self, usernames: Iterable[str]) -> None:
        """The users of the client directories' walk: those with no name yet are looked for."""
        self.unmapped = {user for user in usernames if self.of(user) is None}

    def learn(self, username: str, name: str) -> None:
        self.learned[username] = name
        self.unmapped.discard(username)

    def to_json(self) -> dict[str, str]:
        return self.learned

    def restore(self, data: dict[str, Any]) -> None:
        self.learned = {str(k): str(v) for k, v in data.items()}
