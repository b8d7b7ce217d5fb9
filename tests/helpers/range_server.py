"""A loopback HTTP server of a directory that honours ``Range`` requests.

Run as ``python range_server.py ROOT LOG``: it serves ROOT on 127.0.0.1 (a free
port, printed on the first line of stdout) and appends ``path<TAB>range`` to LOG
for every request.  It runs in its own process: an in-process server can
deadlock with h5py reading a remote file (a garbage-collected h5py object in a
server thread waits for h5py's lock, held by the reader waiting on the server).
"""

from __future__ import annotations

import contextlib
import re
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_RANGE = re.compile(r"bytes=(\d+)-(\d*)$")


class Handler(SimpleHTTPRequestHandler):
    log_path: Path

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _log(self, rng: str | None) -> None:
        with self.log_path.open("a") as fh:
            fh.write(f"{self.path}\t{rng or ''}\n")

    def handle(self) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            super().handle()

    def do_GET(self) -> None:
        rng = self.headers.get("Range")
        self._log(rng)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        size = path.stat().st_size
        match = _RANGE.match(rng or "")
        if match is None:
            body = path.read_bytes()
            self.send_response(200)
        else:
            start = int(match.group(1))
            end = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
            if start >= size:
                self.send_error(416)
                return
            with path.open("rb") as fh:
                fh.seek(start)
                body = fh.read(end - start + 1)
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_HEAD(self) -> None:
        self._log(None)
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()


def main() -> None:
    root, log = sys.argv[1], Path(sys.argv[2])
    handler = type("LoggingHandler", (Handler,), {"log_path": log})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=root))
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
