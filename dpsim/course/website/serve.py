"""Serve the built site on 127.0.0.1 (python -m dpsim site serve; Ctrl-C stops it)."""

from __future__ import annotations

import functools
import http.server
from pathlib import Path


def server(folder: Path, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server of `folder` on 127.0.0.1:`port` (0: a free port), not yet serving."""
    if not (folder / "index.html").exists():
        raise ValueError(f"folder={str(folder)!r} holds no index.html; run `make site` first")
    handler = functools.partial(_QuietHandler, directory=str(folder))
    return http.server.ThreadingHTTPServer(("127.0.0.1", port), handler)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves files without a log line per request."""

    def log_message(self, format: str, *args: object) -> None:
        pass


def main(folder: Path, port: int) -> int:
    """Serve until Ctrl-C; 0."""
    httpd = server(folder, port)
    print(f"dpsim site: http://127.0.0.1:{httpd.server_address[1]}/index.html "
          "(Ctrl-C stops it)", flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()
    return 0
