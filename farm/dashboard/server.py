"""Serve the dashboard: `serve(stats_fn)` in a daemon thread (for an album folder: `farm.live.album_stats_fn`)."""
from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Callable

STATIC = {"/": ("index.html", "text/html; charset=utf-8"), "/app.js": ("app.js", "text/javascript; charset=utf-8"),
          "/style.css": ("style.css", "text/css; charset=utf-8")}


def check_port(host: str, port: int) -> None:
    """Bind and release the dashboard's address now, so a busy or invalid one fails before the render starts."""
    import socket

    from ..errors import UserError

    if not 0 <= port <= 65535:
        raise UserError(f"--port {port}: must be 0…65535")
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise UserError(f"--host {host} --port {port}: cannot serve the dashboard there ({exc.strerror or exc})") \
            from None


def serve(stats_fn: Callable[[], dict], host: str = "127.0.0.1", port: int = 0):
    """Start the server in a daemon thread; → (server, url). Binds 127.0.0.1 unless told otherwise."""
    handler = type("Handler", (_Handler,), {"stats_fn": staticmethod(stats_fn)})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="dashboard").start()
    return server, f"http://{host}:{server.server_address[1]}/"


class _Handler(BaseHTTPRequestHandler):
    stats_fn: Callable[[], dict]

    def do_GET(self):  # noqa: N802 (the stdlib's name)
        path = self.path.split("?")[0]
        if path in STATIC:
            name, kind = STATIC[path]
            return self._send(200, kind, resources.files(__package__).joinpath("static", name).read_bytes())
        if path == "/api/stats":
            return self._send(200, "application/json", json.dumps(self.stats_fn(), default=str).encode())
        if path == "/metrics":
            from prometheus_client import CONTENT_TYPE_LATEST

            from ..prometheus import exposition

            return self._send(200, CONTENT_TYPE_LATEST, exposition(self.stats_fn()))
        self._send(404, "text/plain", b"not found\n")

    def _send(self, code: int, kind: str, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:   # quiet: the render's own output matters more
        pass
