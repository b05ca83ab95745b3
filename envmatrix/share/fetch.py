"""Bounded reads of a published site's files, over HTTP(S) or from a folder.

HTTP goes through urllib3 (already installed with docker and requests; well kept, with explicit
connect and read timeouts and pooled keep-alive connections, so a site of thousands of small records is
read over one connection). Three things are done here rather than left to the library, because its
defaults are unbounded for them: redirects are followed by hand (urllib3 drains each redirect's body
before following it, and a hostile body never ends), bodies are read with `read1` so a slow drip is
checked against the deadline after every arrival rather than after a full buffer, and compressed
bodies are refused (a gzip bomb is small on the wire). And as urllib3 resolves a name again for every
connection, names are resolved once per host here (pinned.py): connections go to the addresses the
redirect rule checked, never to a second DNS answer (DNS rebinding).
"""

from __future__ import annotations

import ipaddress
import socket
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol
from urllib.parse import urljoin, urlsplit

import urllib3

from probes.untrusted import size_text

from .. import __version__
from ..errors import InputError, printable
from ..jsonio import read_bytes_bounded
from .limits import Limits
from .pinned import PinnedPools, Resolve

REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 64 << 10
#: Cloud metadata services: never a redirect's target (AWS, GCP, Azure, OpenStack, Oracle, Alibaba; AWS's IPv6).
METADATA_HOSTS = frozenset({"169.254.169.254", "fd00:ec2::254", "100.100.100.200", "metadata.google.internal", "metadata"})


class SiteError(InputError):
    """One file of a site could not be read within its bounds (missing, too large, too slow, not HTTP 200)."""


class HttpStatus(SiteError):
    """The server answered, with a status other than 200 (`status`: 404 says the file or project is not there)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class SiteExhausted(SiteError):
    """The site as a whole ran out of its budget (time, bytes) or cannot be reached: read nothing more from it."""


class Site(Protocol):
    """Where a published site's files are read from."""

    source: str

    def where(self, rel: str) -> str:
        """A file's full address, for messages and provenance."""
        ...

    def get(self, rel: str, cap: int, kind: str) -> bytes:
        """The file's bytes, at most `cap`; SiteError (this file) or SiteExhausted (the whole site)."""
        ...

    def close(self) -> None: ...


def is_url(text: str) -> bool:
    return urlsplit(text).scheme in ("http", "https")


def _resolve(host: str) -> list[str]:
    """Every address `host` resolves to (an address resolves to itself), in the resolver's order of preference (the
    order connections try them in); none when it does not resolve."""
    try:
        return list(dict.fromkeys(str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)))
    except (OSError, UnicodeError):
        return []


def place(host: str, resolve: Resolve = _resolve) -> str:
    """Where a host is, as redirects are judged: `metadata`, `loopback`, `link-local`, `private` (RFC 1918, ULA,
    CGNAT, reserved, unspecified, multicast) or `public`; the most inward of its addresses (DNS can return several)."""
    name = host.strip("[]").lower().rstrip(".")
    if name in METADATA_HOSTS:
        return "metadata"
    places = []
    for text in [name] if _is_ip(name) else resolve(name) or [name]:
        try:
            ip = ipaddress.ip_address(text.split("%", 1)[0])
        except ValueError:
            places.append("public")  # does not resolve: the connection will fail on its own
            continue
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        if str(ip) in METADATA_HOSTS:
            places.append("metadata")
        elif ip.is_loopback:
            places.append("loopback")
        elif ip.is_link_local:
            places.append("link-local")
        elif ip.is_private or ip.is_reserved or ip.is_unspecified or ip.is_multicast or ip in ipaddress.ip_network("100.64.0.0/10"):
            places.append("private")
        else:
            places.append("public")
    order = ("metadata", "link-local", "loopback", "private", "public")
    return min(places, key=order.index) if places else "public"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(parts.scheme)


def redirect_refusal(source: str, target: str, named: Iterable[str] = (), resolve: Resolve = _resolve) -> str | None:
    """Why a redirect from `source` (the URL the user gave) to `target` is not followed, or None: it must be an
    http(s) URL on the same origin (or the same host moved to https) or on a host the user named, and never at a
    metadata, link-local, loopback or private address unless the source itself is in that same place."""
    if not is_url(target) or not urlsplit(target).hostname:
        return "not an http(s) URL"
    scheme, host, port = _origin(source)
    t_scheme, t_host, t_port = _origin(target)
    same = t_host == host and (t_scheme, t_port) in ((scheme, port), ("https", 443))
    if same:
        return None
    there, here = place(t_host, resolve), place(host, resolve)
    if there != "public" and there != here:
        return f"a {there} address ({t_host}), where the site itself is not: a redirect may not reach inside this network"
    if t_host not in {h.lower().strip("[]") for h in named}:
        return f"another host ({t_host}) than the site's and those you named; name it with --results if you trust it"
    return None


class FolderSite:
    """A site on disk (what `envmatrix publish --out` wrote, or a copy of one)."""

    def __init__(self, folder: Path, limits: Limits) -> None:
        self.folder = folder
        self.source = str(folder)
        self.limits = limits
        self.read = 0

    def where(self, rel: str) -> str:
        return str(self.folder / rel)

    def get(self, rel: str, cap: int, kind: str) -> bytes:
        data = read_bytes_bounded(self.folder / rel, cap, kind, SiteError)
        self.read += len(data)
        if self.read > self.limits.site_bytes:
            raise SiteExhausted(f"{self.source}: more than {self.limits.site_bytes} bytes in all; the rest of this site is left out")
        return data

    def close(self) -> None:
        pass


class HttpSite:
    """A site served over HTTP(S): every file under the caps of `Limits`, the whole site under its budget."""

    def __init__(self, url: str, limits: Limits, named: Iterable[str] = (), resolve: Resolve = _resolve) -> None:
        base = url if url.endswith("/") else url.rsplit("/", 1)[0] + "/" if url.endswith(".json") else url + "/"
        self.base = base
        self.source = base
        self.limits = limits
        self.deadline = time.monotonic() + limits.site_s
        self.read = 0
        self.named = tuple(named)
        # every name resolved once: the redirect rule judges, and connections go to, the same addresses
        self.pool = PinnedPools(resolve, {"User-Agent": f"envmatrix/{__version__}", "Accept-Encoding": "identity"})
        self.resolve: Resolve = self.pool.addresses

    def where(self, rel: str) -> str:
        return urljoin(self.base, rel)

    def close(self) -> None:
        self.pool.clear()

    def get(self, rel: str, cap: int, kind: str) -> bytes:
        return self.fetch(self.where(rel), cap, kind)[0]

    def fetch(self, url: str, cap: int, kind: str, accept: str | None = None) -> tuple[bytes, str, str]:
        """(body, content type, final URL) of `url` within every bound: redirects by `redirect_refusal`, at most
        `cap` bytes, the deadlines, the site's byte budget."""
        deadline = min(self.deadline, time.monotonic() + self.limits.file_s)
        seen = [url]
        for _hop in range(self.limits.redirects + 1):
            response = self._open(url, deadline, accept)
            if response.status in REDIRECTS:
                location = response.headers.get("Location")
                _drop(response)
                if not location:
                    raise SiteError(f"{url}: HTTP {response.status} without a Location")
                url = urljoin(url, location)
                refused = redirect_refusal(seen[0], url, self.named, self.resolve)
                if refused:
                    raise SiteError(f"{seen[0]}: redirected to {printable(url[:200])}, not followed: {refused}")
                if url in seen:
                    raise SiteError(f"{seen[0]}: a redirect loop ({' -> '.join(seen[-3:])} -> {url}); fix the site's redirects")
                seen.append(url)
                continue
            if response.status != 200:
                _drop(response)
                raise HttpStatus(f"{url}: HTTP {response.status}; the site's index names a file it does not serve", response.status)
            content_type = printable(str(response.headers.get("Content-Type", "")).split(";", 1)[0].strip().lower()[:100])
            return self._body(response, url, cap, kind, deadline), content_type, url
        raise SiteError(f"{seen[0]}: more than {self.limits.redirects} redirects; fix the site's redirects")

    def _open(self, url: str, deadline: float, accept: str | None = None) -> urllib3.BaseHTTPResponse:
        left = self._left(url, deadline)
        timeout = urllib3.Timeout(connect=min(self.limits.connect_s, left), read=min(self.limits.stall_s, left))
        try:
            return self.pool.request(url, {"Accept": accept} if accept else {}, timeout)
        except urllib3.exceptions.NewConnectionError as exc:  # before TimeoutError: urllib3 makes it a subclass of one
            raise SiteExhausted(f"{url}: cannot be reached ({_reason(exc)}); check the URL, or that the site is up") from None
        except urllib3.exceptions.TimeoutError:
            raise SiteExhausted(f"{url}: no answer within {min(self.limits.stall_s, left):.3g} s; the site is left out from here on") from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise SiteExhausted(f"{url}: cannot be reached ({_reason(exc)}); check the URL, or that the site is up") from None

    def _left(self, url: str, deadline: float) -> float:
        left = deadline - time.monotonic()
        if left <= 0:
            if deadline >= self.deadline:
                raise SiteExhausted(f"{self.source}: still reading after {self.limits.site_s:g} s; the rest of this site is left out")
            raise SiteError(f"{url}: still arriving after {self.limits.file_s:g} s (a slow drip?); left out")
        return left

    def _body(self, response: urllib3.BaseHTTPResponse, url: str, cap: int, kind: str, deadline: float) -> bytes:
        try:
            encoding = response.headers.get("Content-Encoding", "identity").lower()
            if encoding != "identity":
                raise SiteError(f"{url}: sent {encoding}-compressed although asked for identity; envmatrix reads sites uncompressed")
            length = response.headers.get("Content-Length")
            if length is not None and length.isdigit() and int(length) > cap:
                raise SiteError(f"{url}: {length} bytes, more than {size_text(cap)}: larger than {kind} can be ({cap})")
            parts: list[bytes] = []
            got = 0
            while True:
                try:
                    chunk = response.read1(CHUNK)
                except urllib3.exceptions.TimeoutError:
                    raise SiteError(f"{url}: no byte for {self.limits.stall_s:g} s; left out") from None
                except (urllib3.exceptions.HTTPError, OSError) as exc:
                    raise SiteError(f"{url}: the connection broke ({_reason(exc)}); left out") from None
                if not chunk:
                    break
                got += len(chunk)
                self.read += len(chunk)
                if got > cap:
                    raise SiteError(f"{url}: more than {cap} bytes ({size_text(cap)}), larger than {kind} can be (an endless response?); left out")
                if self.read > self.limits.site_bytes:
                    raise SiteExhausted(f"{self.source}: more than {self.limits.site_bytes} bytes in all; the rest of this site is left out")
                parts.append(chunk)
                self._left(url, deadline)
        except SiteError:
            _drop(response)
            raise
        response.release_conn()
        return b"".join(parts)


def _drop(response: urllib3.BaseHTTPResponse) -> None:
    """Close a response without reading the rest of it (its connection is not reused)."""
    response.close()
    response.release_conn()


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or exc
    return str(reason)[:200]


def open_site(source: str, limits: Limits, named: Iterable[str] = ()) -> Site:
    """A site by URL or folder; `named`: the other hosts the user named, which a redirect may reach."""
    if is_url(source):
        return HttpSite(source, limits, named)
    return FolderSite(Path(source), limits)


def fetch_url(url: str, cap: int, kind: str, *, accept: str | None = None, named: Iterable[str] = (), limits: Limits | None = None) -> tuple[bytes, str, str]:
    """One remote file outside a site (an index's project page for `watch`): (body, content type, final URL), under
    the same redirect rule and bounds as a site's files; SiteError (HttpStatus for a status other than 200)."""
    site = HttpSite(url, limits or Limits(), named)
    try:
        return site.fetch(url, cap, kind, accept)
    finally:
        site.close()
