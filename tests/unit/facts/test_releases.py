"""Releases from the simple API: PEP 691 JSON and PEP 503 HTML from a real HTTP server on loopback, file://
mirrors and find-links folders, as pip's settings name them."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from envmatrix.errors import InputError
from envmatrix.facts.releases import Release, list_releases, parse_html, release_of
from envmatrix.host.pipconfig import PipSettings

JSON_PAGE = {
    "meta": {"api-version": "1.1"},
    "name": "trl",
    "files": [
        {"filename": "trl-0.18.2-py3-none-any.whl", "url": "../../files/trl-0.18.2-py3-none-any.whl", "requires-python": ">=3.9", "yanked": False,
         "core-metadata": {"sha256": "00"}, "upload-time": "2025-06-01T00:00:00Z"},
        {"filename": "trl-0.19.1.tar.gz", "url": "/files/trl-0.19.1.tar.gz", "requires-python": ">=3.9", "yanked": False},
        {"filename": "trl-1.16.0-py3-none-any.whl", "url": "/files/trl-1.16.0-py3-none-any.whl", "requires-python": ">=3.11", "yanked": False},
        {"filename": "trl-1.17.0-py3-none-any.whl", "url": "/files/trl-1.17.0-py3-none-any.whl", "yanked": "broken upload"},
        {"filename": "trl-2.0.0rc1-py3-none-any.whl", "url": "/files/trl-2.0.0rc1-py3-none-any.whl"},
        {"filename": "other-9.0-py3-none-any.whl", "url": "/files/other-9.0-py3-none-any.whl"},
    ],
}  # fmt: skip
HTML_PAGE = """<!DOCTYPE html><html><body>
<a href="/files/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl#sha256=ab" data-requires-python="&gt;=3.10">torch</a>
<a href="/files/torch-2.15.0-cp313-cp313-manylinux_2_28_x86_64.whl">torch</a>
<a href="/files/torch-2.13.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl">torch</a>
<a href="/files/torch-2.12.0-cp311-cp311-linux_x86_64.whl" data-yanked="">torch</a>
</body></html>"""


class Index(http.server.BaseHTTPRequestHandler):
    """trl answers JSON only to a client that asks for it; torch is HTML only; anything else is 404."""

    def do_GET(self) -> None:
        wants_json = "application/vnd.pypi.simple.v1+json" in self.headers.get("Accept", "")
        if self.path == "/simple/trl/" and wants_json:
            body, kind = json.dumps(JSON_PAGE).encode(), "application/vnd.pypi.simple.v1+json"
        elif self.path == "/simple/torch/":
            body, kind = HTML_PAGE.encode(), "text/html"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    server.shutdown()
    server.server_close()


def test_json_page_gives_releases_python_and_metadata(index: str) -> None:
    listing = list_releases("TRL", PipSettings(index, (), ()))
    assert listing.versions() == ["0.18.2", "0.19.1", "1.16.0"], "yanked files, pre-releases and other projects left out"
    assert listing.versions(pre=True)[-1] == "2.0.0rc1"
    assert listing.versions(python="3.10") == ["0.18.2", "0.19.1"], "Requires-Python >=3.11 rules 1.16.0 out on 3.10"
    assert listing.releases["0.18.2"].metadata_url == f"{index.removesuffix('/simple')}/files/trl-0.18.2-py3-none-any.whl.metadata"
    assert listing.releases["0.18.2"].upload_time == "2025-06-01T00:00:00Z"


def test_html_page_and_local_tags(index: str) -> None:
    settings = PipSettings(index, (), ())
    assert list_releases("torch", settings).versions(python="3.11") == ["2.14.1"], "2.15.0 has no cp311 wheel; 2.12.0 is yanked"
    assert list_releases("torch", settings, local="cpu").versions() == ["2.13.0"]


def test_unreachable_and_missing_sources_are_kept_as_problems(index: str, tmp_path: Path) -> None:
    settings = PipSettings(index, ("http://127.0.0.1:9/simple", (tmp_path / "mirror").as_uri()), (str(tmp_path / "nowhere"),))
    listing = list_releases("nosuchproject", settings)
    assert listing.versions() == [] and listing.reachable
    assert set(listing.problems) == {"http://127.0.0.1:9/simple", str(tmp_path / "nowhere")}


def test_file_mirror_and_find_links_folder(tmp_path: Path) -> None:
    mirror = tmp_path / "simple" / "accelerate"
    mirror.mkdir(parents=True)
    (mirror / "index.html").write_text('<a href="../../files/accelerate-1.15.0-py3-none-any.whl">x</a>')
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "accelerate-1.2.1-py3-none-any.whl").write_bytes(b"")
    (wheels / "accelerate_x-9.0-py3-none-any.whl").write_bytes(b"")
    settings = PipSettings("http://127.0.0.1:9/simple", ((tmp_path / "simple").as_uri(),), (str(wheels),))
    listing = list_releases("accelerate", settings)
    assert listing.versions() == ["1.2.1", "1.15.0"] and listing.reachable


def test_nothing_reachable_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from envmatrix.facts import releases

    monkeypatch.setattr(releases, "read_pip_settings", lambda: PipSettings("http://127.0.0.1:9/simple", (), ()))
    with pytest.raises(InputError, match="no trl releases found"):
        releases.available("trl")


@pytest.mark.parametrize(
    ("filename", "expect"),
    [
        ("flash_attn-2.8.3.tar.gz", ("2.8.3", "source")),
        ("trl-0.19.1-py3-none-any.whl", ("0.19.1", "py3")),
        ("tokenizers-0.22.1-cp39-abi3-manylinux_2_17_x86_64.whl", ("0.22.1", "cp39-abi3")),
        ("trl-notaversion.tar.gz", None),
        ("trl-1.0.exe", None),
    ],
)
def test_release_of(filename: str, expect: tuple[str, str] | None) -> None:
    got = release_of(filename, filename.split("-")[0].replace("_", "-"))
    assert (None if got is None else (str(got[0]), got[1])) == expect


def test_abi3_and_sdists_fit() -> None:
    assert Release("1", python_tags={"cp39-abi3"}).fits("3.11") and not Release("1", python_tags={"cp312-abi3"}).fits("3.11")
    assert Release("1", requires_python={">=3.12"}, python_tags={"source"}).fits("3.12") and not Release(
        "1", requires_python={">=3.12"}, python_tags={"source"}
    ).fits("3.11")


def test_html_parser_keeps_data_attributes() -> None:
    files = parse_html('<a href="x-1.0.tar.gz" data-requires-python="&gt;=3.8" data-core-metadata="sha256=ab">x</a><a>no href</a>', "https://i/simple/x/")
    assert files == [{"filename": "x-1.0.tar.gz", "url": "https://i/simple/x/x-1.0.tar.gz", "requires-python": ">=3.8", "yanked": False, "core-metadata": True}]


class Hostile(http.server.BaseHTTPRequestHandler):
    """An index that answers a huge page, JSON that is not a project page, bytes that are not JSON, or a redirect loop."""

    def do_GET(self) -> None:
        if self.path.startswith("/loop"):
            self.send_response(302)
            self.send_header("Location", "/loop" + self.path)
            self.end_headers()
            return
        kind = "application/vnd.pypi.simple.v1+json"
        body = {"/huge/x/": b"[" * (65 << 20), "/notpage/x/": b'{"files": 3}', "/garbage/x/": b"\xff\xfe{{{"}.get(self.path, b"")
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_hostile_indexes_are_problems_not_crashes() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hostile)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        indexes = tuple(f"{base}/{name}" for name in ("notpage", "garbage", "loop"))
        listing = list_releases("x", PipSettings(f"{base}/huge", indexes, ()))
        assert listing.versions() == [] and not listing.reachable
        assert set(listing.problems) == {f"{base}/huge", *indexes}
        assert "more than 64 MiB" in listing.problems[f"{base}/huge"]
    finally:
        server.shutdown()
        server.server_close()
