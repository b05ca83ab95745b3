"""Publish and read back a signed site of many records over a real loopback HTTP server: prints seconds for
publishing (signing included), for reading and verifying every record, and records per second.

    python bench/bench_sites.py [--records 2000] [--record FILE]

The records are copies of one real record file (`--record`, default: a record of the repository's
tests/data) under distinct cell ids, so the site holds as many files as a large matrix would.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from envmatrix.share.keys import public_key_from_pem, public_pem
from envmatrix.share.merge import gather
from envmatrix.share.publish import publish

ROOT = Path(__file__).resolve().parents[1]


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _template() -> Path:
    found = sorted((ROOT / "tests" / "data").rglob("*.json"))
    for path in found:
        data = json.loads(path.read_text())
        if isinstance(data, dict) and isinstance(data.get("record_version"), int) and isinstance(data.get("cell"), dict):
            return path
    sys.exit("no record under tests/data: pass --record FILE")


def _copies(template: Path, n: int, folder: Path) -> None:
    data = json.loads(template.read_text())
    cell = data["cell"]
    for i in range(n):
        scenario = f"s{i:05d}"
        data["cell"] = {**cell, "scenario": scenario, "id": f"{cell['env']}/{scenario}"}
        (folder / f"{cell['env']}__{scenario}.json").write_text(json.dumps(data, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--record", type=Path, default=None)
    args = parser.parse_args()
    template = args.record or _template()
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results"
        results.mkdir()
        _copies(template, args.records, results)
        size = sum(p.stat().st_size for p in results.iterdir())
        key = Ed25519PrivateKey.generate()
        start = time.perf_counter()
        publish([results], Path(tmp) / "site", key, print)
        published = time.perf_counter() - start
        server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(Path(tmp) / "site")))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        trusted = [public_key_from_pem(public_pem(key.public_key()), "bench.pub")]
        start = time.perf_counter()
        merged = gather([f"http://127.0.0.1:{server.server_address[1]}/"], trusted, print)
        read = time.perf_counter() - start
        server.shutdown()
    verified = sum(r.provenance.verified for r in merged.rows)
    print(f"records: {args.records} copies of {template.name} ({size / 1e6:.1f} MB in all)")
    print(f"publish (sign each, write the site): {published:.2f} s ({args.records / published:.0f} records/s)")
    print(f"read over loopback HTTP and verify: {read:.2f} s ({args.records / read:.0f} records/s); verified {verified}/{args.records}")


if __name__ == "__main__":
    main()
