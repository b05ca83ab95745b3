"""Redirects and bodies through the one fetcher (envmatrix/share/fetch.py; issue 42, mechanism 3): a redirect is
followed only to the same origin or a host the user named, and never inward (cloud metadata, link-local,
loopback, private) unless the source itself is there; index pages for `watch` go through the same fetcher; a
site's index.json is read by the untrusted reader (digits, NaN, depth). Loopback servers only: a refused
redirect is refused before any connection, so it ends at once."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from site_servers import _running

from envmatrix.facts.releases import PageError, read_url
from envmatrix.share.fetch import HttpSite, SiteError, _resolve, place, redirect_refusal
from envmatrix.share.limits import Limits
from envmatrix.share.site import parse_index


class Redirecting(BaseHTTPRequestHandler):
    """`/to?URL` answers 302 to URL; `/index.json` a good empty index; `/reason` 500 with a hostile reason phrase."""

    protocol_version = "HTTP/1.0"
    targets: ClassVar[dict[str, str]] = {}

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        name = self.path.lstrip("/").split("/", 1)[0]
        if name in self.targets:
            self.send_response(302)
            self.send_header("Location", self.targets[name])
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif self.path.endswith("index.json"):
            body = json.dumps({"site_version": 1, "records": []}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self.send_response(404, "\x1b]0;owned\x07 [click](http://evil.example) @everyone")
            self.send_header("Content-Length", "0")
            self.end_headers()


@contextmanager
def serve(targets: dict[str, str]) -> Iterator[str]:
    Redirecting.targets = targets
    with _running(ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)) as url:
        yield url


def public(host: str) -> list[str]:
    """A resolver for the pure tests: names under .example are public but `inside.example` (private) and
    `rebind.example` (public and loopback); other names and numbers as this host resolves them."""
    if not host.endswith(".example"):
        return _resolve(host)
    return {"inside.example": ["10.1.2.3"], "rebind.example": ["93.184.216.34", "127.0.0.1"]}.get(host, ["93.184.216.34"])


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://[fd00:ec2::254]/latest/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://[::ffff:169.254.169.254]/", "metadata"),
        ("http://169.254.10.1/", "link-local"),
        ("http://127.0.0.1:8080/", "loopback"),
        ("http://localhost/", "loopback"),
        ("http://[::1]/", "loopback"),
        ("http://2130706433/", "loopback"),
        ("http://10.0.0.1/admin", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://inside.example/", "private"),
        ("http://rebind.example/", "loopback"),
        ("file:///etc/passwd", "not an http(s) URL"),
        ("gopher://x/", "not an http(s) URL"),
    ],
)
def test_a_remote_site_never_redirects_inward(target: str, why: str) -> None:
    host = target.split("//", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0].strip("[]") if "[" not in target else target.split("[", 1)[1].split("]")[0]
    # even when the user named the inward host, a remote site may not send the reader there
    refused = redirect_refusal("https://site.example/table/", target, named=[host], resolve=public)
    assert refused and why in refused


def test_what_a_redirect_may_reach() -> None:
    assert redirect_refusal("http://site.example/t/", "http://site.example/t/index.json", resolve=public) is None
    assert redirect_refusal("http://site.example/t", "https://site.example/t/", resolve=public) is None, "moved to https"
    assert "another host" in str(redirect_refusal("https://site.example/", "https://other.example/", resolve=public))
    assert redirect_refusal("https://site.example/", "https://mirror.example/", named=["mirror.example"], resolve=public) is None
    assert "another host" in str(redirect_refusal("https://site.example/", "http://site.example:8080/", resolve=public))
    # a site inside the network may redirect inside the same place (a lab's mirror), never to metadata
    assert redirect_refusal("http://10.0.0.5/", "http://10.0.0.6/", named=["10.0.0.6"], resolve=public) is None
    assert "metadata" in str(redirect_refusal("http://10.0.0.5/", "http://169.254.169.254/", named=["169.254.169.254"], resolve=public))


def test_places() -> None:
    assert place("127.0.0.1") == place("localhost") == place("0x7f.1") == "loopback"
    assert place("169.254.169.254") == "metadata" and place("fe80::1") == "link-local" and place("100.64.0.1") == "private"
    assert place("0.0.0.0") == "private" and place("93.184.216.34") == "public"


def test_a_site_that_redirects_to_the_metadata_service_is_refused_at_once() -> None:
    with serve({"meta": "http://169.254.169.254/latest/meta-data/iam/"}) as url:
        site = HttpSite(url + "meta/", Limits(connect_s=30, stall_s=30))
        start = time.monotonic()
        with pytest.raises(SiteError, match="not followed: a metadata address"):
            site.get("index.json", 1 << 20, "a site index")
        assert time.monotonic() - start < 5, "refused before any connection"


def test_a_redirect_to_another_port_is_refused_unless_named() -> None:
    with serve({}) as other, serve({"hop": other + "index.json"}) as url:
        with pytest.raises(SiteError, match="another host"):
            HttpSite(url + "hop/", Limits(), named=()).get("index.json", 1 << 20, "a site index")
        # (both servers are 127.0.0.1: naming it lets the redirect through, loopback to loopback)
        got = HttpSite(url + "hop/", Limits(), named=["127.0.0.1"]).get("index.json", 1 << 20, "a site index")
        assert json.loads(got)["site_version"] == 1


def test_index_pages_for_watch_go_through_the_fetcher() -> None:
    with serve({"simple": "http://169.254.169.254/simple/torch/"}) as url:
        with pytest.raises(PageError, match="metadata"):
            read_url(url + "simple/torch/", timeout=30)
        with pytest.raises(PageError) as missing:
            read_url(url + "nothing/", timeout=5)
    assert missing.value.status == 404
    assert "\x1b" not in str(missing.value) and "@everyone" not in str(missing.value), "the reason phrase is not repeated"


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (b'{"site_version": 1' + b"0" * 4000 + b', "records": []}', "digits"),
        (b'{"site_version": 1, "records": [NaN]}', "NaN is not a JSON number"),
        (b'{"site_version": true, "records": []}', "no site_version"),
        (b'{"site_version": 1, "records": ' + b"[" * 5000 + b"]" * 5000 + b"}", "nested more than"),
    ],
)
def test_a_site_index_is_read_by_the_untrusted_reader(body: bytes, says: str) -> None:
    with pytest.raises(SiteError, match=says):
        parse_index(body, "http://127.0.0.1/index.json", Limits())
