"""One client command as the server hands it to the dispatcher (the transactions' statements
and every command family take it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Request:
    """One command as the dispatcher sees it."""

    db: str
    name: str
    body: dict[str, Any]
    secondary_ok: bool
    connection_id: int

    def handshake_application(self) -> str | None:
        """The application a hello/isMaster handshake names (`client.application.name`)."""
        if self.name.lower() not in ("hello", "ismaster"):
            return None
        app = ((self.body.get("client") or {}).get("application") or {}).get("name")
        return app if isinstance(app, str) else None
