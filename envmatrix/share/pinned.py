"""Connections pinned to the addresses that were checked (DNS rebinding: a name that answers a public address to
the redirect check and a private one to the connection).

Each host name is resolved once per site, by the same resolver the redirect rule judges with, and every
connection to that name goes to exactly those addresses: urllib3 pools are opened on the address itself, with the
name kept where it belongs: the Host header, and for https the SNI and the certificate check (urllib3's documented
`server_hostname`, which leaves hostname verification on in the ssl context). urllib3 reads no proxy settings
from the environment, so no connection leaves through a proxy that would resolve the name again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from urllib.parse import urlsplit

import urllib3

#: A host name's addresses (an address: itself); none when it does not resolve.
Resolve = Callable[[str], list[str]]


class PinnedPools:
    """One keep-alive pool per (scheme, name, port, address); names resolved once, by `resolve`."""

    def __init__(self, resolve: Resolve, headers: Mapping[str, str]) -> None:
        self._resolve = resolve
        self.headers = dict(headers)
        self._addresses: dict[str, list[str]] = {}
        self._pools: dict[tuple[str, str, int, str], urllib3.HTTPConnectionPool] = {}

    def addresses(self, host: str) -> list[str]:
        """The addresses of `host` as first resolved: what the redirect check judged and where connections go."""
        name = host.strip("[]").lower().rstrip(".")
        if name not in self._addresses:
            self._addresses[name] = list(self._resolve(name))
        return self._addresses[name]

    def request(self, url: str, headers: Mapping[str, str], timeout: urllib3.Timeout) -> urllib3.BaseHTTPResponse:
        """GET `url`, unread, on the pinned addresses in turn: the next when one refuses or is unreachable (at once),
        not when one times out (the timeout is the file's deadline, not one address's)."""
        parts = urlsplit(url)
        name = (parts.hostname or "").lower()
        default = 443 if parts.scheme == "https" else 80
        port = parts.port or default
        addresses = self.addresses(name)
        if not addresses:
            raise OSError(f"{name} does not resolve")
        shown = f"[{name}]" if ":" in name else name
        host = shown if port == default else f"{shown}:{port}"
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        sent = {**self.headers, **headers, "Host": host}
        for i, address in enumerate(addresses):
            try:
                return self._pool(parts.scheme, name, port, address).urlopen(
                    "GET", path, headers=sent, preload_content=False, decode_content=False, timeout=timeout, redirect=False, retries=False
                )
            except urllib3.exceptions.NewConnectionError:
                if i == len(addresses) - 1:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _pool(self, scheme: str, name: str, port: int, address: str) -> urllib3.HTTPConnectionPool:
        key = (scheme, name, port, address)
        if key not in self._pools:
            if scheme == "https":
                self._pools[key] = urllib3.HTTPSConnectionPool(address, port, server_hostname=name, retries=False)
            else:
                self._pools[key] = urllib3.HTTPConnectionPool(address, port, retries=False)
        return self._pools[key]

    def clear(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()
