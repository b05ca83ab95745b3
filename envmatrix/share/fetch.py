"""Bounded reads of a published site's files, over HTTP(S) or from a folder.

HTTP goes through urllib3 (already installed with docker and requests; well kept, with explicit
connect and read timeouts and pooled keep-alive connections, so a site of thousands of small records is
read over one connection). Three things are done here rather than left to the library, because its
defaults are unbounded for them: redirects are followed by hand (urllib3 drains each redirect's body
before following it, and a hostile body never ends), bodies are read with `read1` so a slow drip is
checked against the deadline after every arrival rather than after a full buffer, and compressed
bodies are refused (a gzip bomb is small on the wire).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Protocol
from urllib.parse import urljoin, urlsplit

import urllib3

from .. import __version__
from ..errors import InputError
from ..jsonio import read_bytes_bounded
from .limits import Limits

REDIRECTS = (301, 302, 303, 307, 308)
CHUNK = 64 << 10


class SiteError(InputError):
    """One file of a site could not be read within its bounds (missing, too large, too slow, not HTTP 200)."""


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

    def __init__(self, url: str, limits: Limits) -> None:
        base = url if url.endswith("/") else url.rsplit("/", 1)[0] + "/" if url.endswith(".json") else url + "/"
        self.base = base
        self.source = base
        self.limits = limits
        self.deadline = time.monotonic() + limits.site_s
        self.read = 0
        self.pool = urllib3.PoolManager(num_pools=4, headers={"User-Agent": f"envmatrix/{__version__}", "Accept-Encoding": "identity"}, retries=False)

    def where(self, rel: str) -> str:
        return urljoin(self.base, rel)

    def close(self) -> None:
        self.pool.clear()

    def get(self, rel: str, cap: int, kind: str) -> bytes:
        url = self.where(rel)
        deadline = min(self.deadline, time.monotonic() + self.limits.file_s)
        seen = [url]
        for _hop in range(self.limits.redirects + 1):
            response = self._open(url, deadline)
            if response.status in REDIRECTS:
                location = response.headers.get("Location")
                _drop(response)
                if not location:
                    raise SiteError(f"{url}: HTTP {response.status} without a Location")
                url = urljoin(url, location)
                if not is_url(url):
                    raise SiteError(f"{seen[0]}: redirected to {url[:200]!r}, not an http(s) URL")
                if url in seen:
                    raise SiteError(f"{seen[0]}: a redirect loop ({' -> '.join(seen[-3:])} -> {url}); fix the site's redirects")
                seen.append(url)
                continue
            if response.status != 200:
                _drop(response)
                raise SiteError(f"{url}: HTTP {response.status}; the site's index names a file it does not serve")
            return self._body(response, url, cap, kind, deadline)
        raise SiteError(f"{seen[0]}: more than {self.limits.redirects} redirects; fix the site's redirects")

    def _open(self, url: str, deadline: float) -> urllib3.BaseHTTPResponse:
        left = self._left(url, deadline)
        timeout = urllib3.Timeout(connect=min(self.limits.connect_s, left), read=min(self.limits.stall_s, left))
        try:
            return self.pool.request("GET", url, preload_content=False, decode_content=False, timeout=timeout, redirect=False)
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
                raise SiteError(f"{url}: {length} bytes, larger than {kind} can be ({cap})")
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
                    raise SiteError(f"{url}: more than {cap} bytes, larger than {kind} can be (an endless response?); left out")
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


def open_site(source: str, limits: Limits) -> Site:
    """A site by URL or folder."""
    if is_url(source):
        return HttpSite(source, limits)
    return FolderSite(Path(source), limits)
