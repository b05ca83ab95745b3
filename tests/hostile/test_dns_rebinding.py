"""DNS rebinding against the one fetcher (envmatrix/share/fetch.py, envmatrix/share/pinned.py; issue 42): a name
that answers an allowed address to the redirect check and a forbidden one afterwards is connected to at the
address that was checked. Real HTTP(S) servers on loopback; only the name's answers are simulated (a patched
socket.getaddrinfo that turns after its first answer). HTTPS: a throwaway CA (trustme), the certificate still
checked against the name, never the address."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import trustme
from site_servers import _running

from envmatrix.share.fetch import HttpSite, SiteError, SiteExhausted, place
from envmatrix.share.limits import Limits

NAME = "rebind.test"
FORBIDDEN = "169.254.169.254"  # the metadata service: what the name turns to after its first answer
INDEX = json.dumps({"site_version": 1, "records": []}).encode()


class Recording(BaseHTTPRequestHandler):
    """`/hop/...` answers 302 to `hop_to`; anything else a small index. Every request's Host header is kept.
    HTTP/1.0: the connection closes after each answer, so every request is a fresh connection (a fresh lookup,
    were the name looked up again)."""

    protocol_version = "HTTP/1.0"
    hop_to: ClassVar[str] = ""
    hosts: ClassVar[list[str]] = []

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        type(self).hosts.append(str(self.headers.get("Host")))
        if self.path.startswith("/hop/"):
            self.send_response(302)
            self.send_header("Location", self.hop_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(INDEX)))
        self.end_headers()
        self.wfile.write(INDEX)


@pytest.fixture
def rebinding(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """NAME resolves to 127.0.0.1 on its first lookup and to the metadata address on every later one; every
    other host as this machine resolves it. Returns the log of NAME's lookups."""
    real = socket.getaddrinfo
    lookups: list[str] = []

    def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if str(host).rstrip(".").lower() != NAME:
            return real(host, port, *args, **kwargs)
        address = "127.0.0.1" if not lookups else FORBIDDEN
        lookups.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, int(port or 0)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    Recording.hosts = []
    return lookups


@contextmanager
def serve(tls: ssl.SSLContext | None = None) -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    with _running(server):
        yield int(server.server_address[1])


def test_a_redirect_target_is_connected_to_at_the_address_that_was_checked(rebinding: list[str]) -> None:
    with serve() as port:
        Recording.hop_to = f"http://{NAME}:{port}/index.json"
        site = HttpSite(f"http://127.0.0.1:{port}/hop/", Limits(connect_s=3, stall_s=3), named=[NAME])
        try:
            body = site.get("index.json", 1 << 20, "a site index")
        finally:
            site.close()
    assert json.loads(body)["site_version"] == 1
    # the check saw 127.0.0.1 (loopback, as the site itself: allowed); the connection went to 127.0.0.1 too,
    # with the name as Host, although the name now answers the metadata address
    assert Recording.hosts == [f"127.0.0.1:{port}", f"{NAME}:{port}"]
    assert rebinding == ["127.0.0.1"], "the name was looked up once, for the check; the connection used that answer"
    assert place(NAME) == "metadata", "the resolver did turn: a second lookup would have reached the metadata address"


def test_a_name_that_answers_a_forbidden_address_first_is_refused_before_any_connection(rebinding: list[str]) -> None:
    rebinding.append("(an earlier answer)")  # the fixture's next answer is the forbidden one
    with serve() as port:
        Recording.hop_to = f"http://{NAME}:{port}/index.json"
        site = HttpSite(f"http://127.0.0.1:{port}/hop/", Limits(connect_s=3, stall_s=3), named=[NAME])
        with pytest.raises(SiteError, match="not followed: a metadata address"):
            site.get("index.json", 1 << 20, "a site index")
        site.close()
    assert Recording.hosts == [f"127.0.0.1:{port}"], "nothing reached the name"


@pytest.fixture
def tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[trustme.CA, ssl.SSLContext, list[str]]]:
    """A throwaway CA that this process trusts (SSL_CERT_FILE, read by the default context urllib3 loads), and a
    server context whose SNI callback records the names clients ask for."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    asked: list[str] = []

    def record(_sock: Any, name: str | None, _ctx: Any) -> None:
        asked.append(str(name))

    server.sni_callback = record
    yield ca, server, asked


def test_https_keeps_the_name_for_sni_and_the_certificate_while_the_address_stays_pinned(
    rebinding: list[str], tls: tuple[trustme.CA, ssl.SSLContext, list[str]]
) -> None:
    ca, server, asked = tls
    ca.issue_cert(NAME).configure_cert(server)  # a certificate for the name only, not for 127.0.0.1
    with serve(server) as port:
        site = HttpSite(f"https://{NAME}:{port}/", Limits(connect_s=3, stall_s=3))
        try:
            first = site.get("index.json", 1 << 20, "a site index")
            second = site.get("records/index.json", 1 << 20, "a site index")  # a new connection (HTTP/1.0)
        finally:
            site.close()
    assert json.loads(first) == json.loads(second) == {"site_version": 1, "records": []}
    assert asked == [NAME, NAME], "SNI names the host on every connection"
    assert Recording.hosts == [f"{NAME}:{port}"] * 2
    assert rebinding == ["127.0.0.1"], "the second connection went to the first answer, not to a second lookup"


def test_https_still_refuses_a_certificate_for_another_name(rebinding: list[str], tls: tuple[trustme.CA, ssl.SSLContext, list[str]]) -> None:
    ca, server, _asked = tls
    ca.issue_cert("other.test", "127.0.0.1").configure_cert(server)  # valid for the address, not for the name
    with serve(server) as port:
        site = HttpSite(f"https://{NAME}:{port}/", Limits(connect_s=3, stall_s=3))
        with pytest.raises(SiteExhausted, match=f"Hostname mismatch, certificate is not valid for .{NAME}."):
            site.get("index.json", 1 << 20, "a site index")
        site.close()
    assert Recording.hosts == [], "no request was sent over a connection whose certificate does not name the host"


def test_a_pinned_address_that_refuses_falls_back_to_the_next_checked_one() -> None:
    Recording.hosts = []
    with serve() as port:  # on 127.0.0.1 only: 127.0.0.2 (loopback too) refuses the port
        site = HttpSite(f"http://{NAME}:{port}/", Limits(connect_s=3, stall_s=3), resolve=lambda _host: ["127.0.0.2", "127.0.0.1"])
        try:
            body = site.get("index.json", 1 << 20, "a site index")
        finally:
            site.close()
        assert json.loads(body)["site_version"] == 1 and Recording.hosts == [f"{NAME}:{port}"]
        only = HttpSite(f"http://{NAME}:{port}/", Limits(connect_s=3, stall_s=3), resolve=lambda _host: ["127.0.0.2"])
        with pytest.raises(SiteExhausted, match="cannot be reached"):
            only.get("index.json", 1 << 20, "a site index")  # only the checked address is tried
        only.close()
