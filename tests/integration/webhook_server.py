"""A real HTTP server on a free local port, in a thread, that records the JSON bodies POSTed to it
and answers ``status`` (200, or an error to see a delivery fail)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Receiver:
    url: str
    status: int
    bodies: list[dict[str, Any]] = field(default_factory=list)
    posts: int = 0  # every POST, answered with an error or not


@contextmanager
def webhook_receiver(status: int = 200) -> Iterator[Receiver]:
    receiver = Receiver(url="", status=status)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            receiver.posts += 1
            if receiver.status == 200 and self.headers.get("Content-Type") == "application/json":
                receiver.bodies.append(json.loads(body))
            self.send_response(receiver.status)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)  # port 0: a free one
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
