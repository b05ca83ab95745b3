"""Real HTTP servers on loopback for the sharing tests: one serving a published site's folder as
`python3 -m http.server` would, and a hostile one whose paths misbehave on purpose.

Both run in a thread of the test process on 127.0.0.1 and an ephemeral port: no network beyond loopback.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _running(server: ThreadingHTTPServer) -> Iterator[str]:
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def serve_folder(folder: Path) -> Iterator[str]:
    """Serve `folder` (the stdlib's static file handler, as `python3 -m http.server --directory` does); yields its URL."""
    with _running(ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder)))) as url:
        yield url


DRIP_S = 0.2  # the slow drip's pause between bytes
ENTRY = {"id": "cpu-x/s", "path": "records/a.json", "attestation": None}


def _index(records: list[dict[str, Any]]) -> bytes:
    return json.dumps({"site_version": 1, "envmatrix": "0", "record_version": 2, "signer": None, "records": records}).encode()


class Hostile(BaseHTTPRequestHandler):
    """Each top-level path is one misbehaving site:

    /huge/        index.json announces 10 GiB
    /many/        index.json lists 25,000 records (a valid, but too long, index)
    /endless/     index.json never ends (no length, bytes forever)
    /records/     a good index whose records are not JSON, and one that never ends
    /loop/        index.json redirects to a page that redirects back
    /hops/        every page redirects to the next one, forever
    /drip/        index.json arrives one byte at a time, DRIP_S apart
    /stall/       index.json's headers, then silence
    """

    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers if headers is not None else {"Content-Length": str(len(body))}).items():
            self.send_header(k, v)
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _forever(self, chunk: bytes, pause: float = 0.0) -> None:
        try:
            while True:
                self.wfile.write(chunk)
                self.wfile.flush()
                if pause:
                    time.sleep(pause)
        except OSError:  # the reader hung up: what a bounded reader does
            return

    def do_GET(self) -> None:
        site, _, rest = self.path.lstrip("/").partition("/")
        if site == "huge":
            self._send(200, headers={"Content-Length": str(10 << 30)})
            self._forever(b" " * 65536)
        elif site == "many":
            self._send(200, _index([{**ENTRY, "path": f"records/r{i}.json"} for i in range(25_000)]))
        elif site == "endless":
            self._send(200, headers={"Content-Type": "application/json"})
            self._forever(b'{"records": [' + b" " * 65536)
        elif site == "records":
            if rest == "index.json":
                entries = [{**ENTRY, "path": f"records/{n}.json"} for n in ("garbage", "html", "endless")]
                self._send(200, _index(entries))
            elif rest == "records/endless.json":
                self._send(200, headers={})
                self._forever(b"[" * 4096)
            else:
                self._send(200, b"\x00\xff not json" if "garbage" in rest else b"<html><body>It works!</body></html>")
        elif site == "loop":
            self._send(302, headers={"Location": "/loop/b" if rest == "index.json" else "/loop/index.json", "Content-Length": "0"})
        elif site == "hops":
            n = int(rest.split("/")[0]) if rest.split("/")[0].isdigit() else 0
            self._send(301, headers={"Location": f"/hops/{n + 1}/index.json", "Content-Length": "0"})
        elif site == "drip":
            self._send(200, headers={"Content-Length": "100000"})
            self._forever(b" ", DRIP_S)
        elif site == "stall":
            self._send(200, headers={"Content-Length": "100"})
            time.sleep(30)
        else:
            self._send(404, b"no such site")


@contextmanager
def serve_hostile() -> Iterator[str]:
    """The hostile server; yields its base URL (append `huge/`, `loop/`, ...)."""
    with _running(ThreadingHTTPServer(("127.0.0.1", 0), Hostile)) as url:
        yield url
