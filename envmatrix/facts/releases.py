"""The releases of a package on the indexes the user's pip uses (pip's index-url, extra-index-urls and
find-links, read by host/pipconfig.py), from the files each index lists: for bisect and watch.

Each index is asked for the project's page in the JSON form of the simple API (PEP 691), HTML (PEP 503)
accepted where a server or a `file://` mirror has only that; find-links are folders of files or HTML pages of
links. A file's release comes from its name (packaging's wheel and sdist name parsers), yanked files
(PEP 592) are left out as pip leaves them out, and each release keeps what decides whether it can install
here: its Requires-Python, the Python tags of its wheels, and where its core metadata can be read (PEP 658)
without downloading the file.

Written on the standard library's HTTP client and HTML parser rather than a simple-API client library: the
ones on PyPI need `requests`, which has no `file://` URLs, and pip's settings point at `file://` mirrors and
folders as often as at servers. Every reply is read within a size bound and a timeout.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, canonicalize_name, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from probes import untrusted

from ..errors import InputError
from ..host.pipconfig import PipSettings, read_pip_settings, torch_index_url

PYPI = "https://pypi.org/simple"
ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01"
#: What one index page may send: its owner is probes/untrusted.py, with the bounds on every file envmatrix reads
#: from elsewhere; the time a request may take is the network's, here.
MAX_PAGE_BYTES = untrusted.INDEX_PAGE.max_bytes
TIMEOUT_S = 30.0

#: The distribution behind each built-in axis that is a release on an index (cuda, gpu and python are not);
#: a package axis is its own distribution name.
PACKAGES = {"torch": "torch", "transformers": "transformers", "flash_attn": "flash-attn"}


@dataclass
class Release:
    """One release as the indexes list it: its files' Python tags and Requires-Python, and where one
    file's core metadata is (PEP 658), when an index serves it."""

    version: str
    requires_python: set[str] = field(default_factory=set)
    python_tags: set[str] = field(default_factory=set)  # `cp311`, `py3`, `cp39-abi3`; `source` for an sdist
    metadata_url: str | None = None
    upload_time: str | None = None

    def fits(self, python: str) -> bool:
        """Whether some file of the release can install on Python `python` (3.MINOR): its Requires-Python
        admits it and a wheel's tag names it (an sdist fits any Python its Requires-Python admits)."""
        full = f"{python}.0"
        try:
            if self.requires_python and not any(SpecifierSet(spec).contains(full, prereleases=True) for spec in self.requires_python):
                return False
        except InvalidSpecifier:
            pass
        minor = python.split(".")[1]
        for tag in self.python_tags:
            interp, _, abi = tag.partition("-")
            if tag == "source" or interp in ("py3", f"py3{minor}", f"cp3{minor}"):
                return True
            if abi == "abi3" and interp.startswith("cp3") and interp[3:].isdigit() and int(interp[3:]) <= int(minor):
                return True
        return False


@dataclass
class Listing:
    """Every release the indexes list for one distribution, and what could not be asked (source → why)."""

    name: str
    releases: dict[str, Release] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)

    def versions(self, *, pre: bool = False, python: str | None = None) -> list[str]:
        """The releases, oldest first: final ones unless `pre`, those that fit `python` when it is given."""
        out = []
        for text, rel in self.releases.items():
            v = Version(text)
            if (pre or not (v.is_prerelease or v.is_devrelease)) and (python is None or rel.fits(python)):
                out.append(text)
        return sorted(out, key=Version)

    @property
    def reachable(self) -> bool:
        """Whether any source answered (an empty answer included)."""
        return len(self.problems) < len(self.asked)


class _Links(HTMLParser):
    """The anchors of a PEP 503 page: href and the data- attributes the simple API defines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            found = dict(attrs)
            if found.get("href"):
                self.links.append(found)


def parse_html(text: str, base: str) -> list[dict[str, object]]:
    """A PEP 503 page as PEP 691 file entries (filename, url, requires-python, yanked, core-metadata)."""
    parser = _Links()
    parser.feed(text)
    files: list[dict[str, object]] = []
    for link in parser.links:
        url = urllib.parse.urljoin(base, str(link["href"]))
        filename = urllib.parse.unquote(urllib.parse.urlsplit(url).path.rsplit("/", 1)[-1])
        metadata = link.get("data-core-metadata") or link.get("data-dist-info-metadata")
        files.append(
            {
                "filename": filename,
                "url": url,
                "requires-python": link.get("data-requires-python"),
                "yanked": "data-yanked" in link,
                "core-metadata": bool(metadata) and metadata != "false",
            }
        )
    return files


def parse_json(text: str, base: str) -> list[dict[str, object]]:
    """A PEP 691 project page's file entries, their URLs made absolute; ValueError when it is not one."""
    data = untrusted.parse_json(text, base, untrusted.INDEX_PAGE)  # Refused is a ValueError
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ValueError("not a PEP 691 project page (no files list)")
    out = []
    for f in data["files"]:
        if isinstance(f, dict) and isinstance(f.get("filename"), str) and isinstance(f.get("url"), str):
            out.append({**f, "url": urllib.parse.urljoin(base, f["url"]), "core-metadata": bool(f.get("core-metadata") or f.get("dist-info-metadata"))})
    return out


def read_url(url: str, *, limit: int = MAX_PAGE_BYTES, accept: str = ACCEPT, timeout: float = TIMEOUT_S, named: Iterable[str] = ()) -> tuple[str, str, str]:
    """(text, content type, final URL) of a page, within `limit` bytes; OSError when it cannot be read. http(s)
    through the one fetcher (share/fetch.py: redirects only where the user's indexes are, bounded bodies); a
    404 is `HttpStatus`; file: URLs (a local mirror) read as files."""
    if url.startswith(("http:", "https:")):
        from ..share.fetch import SiteError, fetch_url
        from ..share.limits import Limits

        try:
            body, kind, final = fetch_url(url, limit, "an index page", accept=accept, named=named, limits=Limits(file_s=timeout, stall_s=timeout))
        except SiteError as exc:
            raise PageError(str(exc), getattr(exc, "status", None)) from None
        return body.decode("utf-8", errors="replace"), kind, final
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "envmatrix"})
    with urllib.request.urlopen(request, timeout=timeout) as reply:
        raw = reply.read(limit + 1)
        if len(raw) > limit:
            raise OSError(f"{url}: more than {limit >> 20} MiB; not a project page")
        return raw.decode("utf-8", errors="replace"), ("application/json" if url.endswith(".json") else "text/html"), reply.geturl()


class PageError(OSError):
    """An index page could not be read; `status` is the HTTP status when the server answered (404: not there)."""

    def __init__(self, message: str, status: int | None) -> None:
        super().__init__(message)
        self.status = status


def index_files(index: str, name: str, named: Iterable[str] = ()) -> list[dict[str, object]]:
    """The files one index lists for a project (PEP 691 JSON, else PEP 503 HTML); OSError/ValueError when it cannot say."""
    url = f"{index.rstrip('/')}/{canonicalize_name(name)}/"
    if url.startswith("file:"):
        folder = Path(urllib.request.url2pathname(urllib.parse.urlsplit(url).path))
        if not folder.is_dir():
            return []  # a local mirror without the project: it lists nothing
        page = folder / "index.html"
        url = page.as_uri()
    try:
        text, kind, final = read_url(url, named=named)
    except (urllib.error.HTTPError, PageError) as exc:
        if getattr(exc, "code", None) == 404 or getattr(exc, "status", None) == 404:
            return []  # the index does not have the project
        raise
    if "json" in kind:
        return parse_json(text, final)
    return parse_html(text, final)


def folder_files(link: str, name: str, named: Iterable[str] = ()) -> list[dict[str, object]]:
    """A find-links entry: a folder of files (its names), or an HTML page of links."""
    if link.startswith(("http:", "https:")):
        text, _, final = read_url(link, accept="text/html", named=named)
        return parse_html(text, final)
    folder = Path(urllib.request.url2pathname(urllib.parse.urlsplit(link).path) if link.startswith("file:") else link)
    if not folder.is_dir():
        raise OSError(f"find-links {link}: not a folder")
    prefix = canonicalize_name(name)
    return [{"filename": p.name, "url": p.as_uri()} for p in sorted(folder.iterdir()) if canonicalize_name(p.name.split("-")[0]) == prefix]


def release_of(filename: str, name: str) -> tuple[Version, str] | None:
    """(version, python tag) of a distribution file of project `name`; None for another project's file or a
    name neither parser reads (packaging's wheel and sdist name rules)."""
    try:
        if filename.endswith(".whl"):
            project, version, _, tags = parse_wheel_filename(filename)
            tag = next(iter(sorted(f"{t.interpreter}-{t.abi}" if t.abi == "abi3" else t.interpreter for t in tags)), "")
        elif filename.endswith((".tar.gz", ".zip")):
            project, version = parse_sdist_filename(filename)
            tag = "source"
        else:
            return None
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return (version, tag) if project == canonicalize_name(name) else None


def collect(listing: Listing, files: Iterable[dict[str, object]], *, local: str | None) -> None:
    """Add files to a listing: `local` None keeps releases without a local tag, else only those tagged `+local`
    (a CPU torch is `2.13.0+cpu`), listed by their public version."""
    for f in files:
        if f.get("yanked") not in (None, False):
            continue
        found = release_of(str(f["filename"]), listing.name)
        if found is None:
            continue
        version, tag = found
        if (version.local or None) != local:
            continue
        rel = listing.releases.setdefault(version.public, Release(version.public))
        rel.python_tags.add(tag)
        if isinstance(f.get("requires-python"), str) and f["requires-python"]:
            rel.requires_python.add(str(f["requires-python"]))
        if f.get("core-metadata") and (rel.metadata_url is None or tag == "py3"):  # a pure-Python wheel's metadata holds for every Python
            rel.metadata_url = str(f["url"]).split("#", 1)[0] + ".metadata"
        if isinstance(f.get("upload-time"), str):
            rel.upload_time = min(filter(None, (rel.upload_time, str(f["upload-time"]))))


def list_releases(name: str, settings: PipSettings | None = None, *, local: str | None = None, extra: Iterable[str] = ()) -> Listing:
    """Every release of `name` on pip's indexes and find-links (and `extra` indexes, such as PyTorch's wheel
    index for a build), each source asked once; what cannot be asked is kept in `problems`, never raised."""
    settings = settings or read_pip_settings()
    listing = Listing(canonicalize_name(name))
    indexes = [settings.index_url or PYPI, *settings.extra_index_urls, *extra]
    named = {urllib.parse.urlsplit(u).hostname or "" for u in [*indexes, *settings.find_links]} - {""}
    for source, reader in [*((i, index_files) for i in dict.fromkeys(indexes)), *((f, folder_files) for f in settings.find_links)]:
        listing.asked.append(source)
        try:
            collect(listing, reader(source, name, named), local=local)
        except (OSError, ValueError, UnicodeError) as exc:
            listing.problems[source] = str(getattr(exc, "reason", None) or exc)[:200]
    return listing


def torch_sources(cuda: str) -> tuple[str | None, list[str]]:
    """Where a torch build comes from for the install set: (local tag, extra index). A CPU torch is the `+cpu`
    build (find-links or PyTorch's CPU index); a CUDA build is a public version on PyTorch's index for it."""
    if cuda == "none":
        return "cpu", [torch_index_url("cpu")]
    return None, [torch_index_url("cu" + cuda.replace(".", ""))]


def available(axis: str, *, pre: bool = False, cuda: str | None = None) -> list[str]:
    """Every release of the axis's package on the user's indexes, newest first; a torch axis lists the
    builds for `cuda` (none: CPU builds). InputError when no source could be asked."""
    dist = PACKAGES.get(axis, axis)
    local, extra = torch_sources(cuda) if dist == "torch" and cuda is not None else (None, [])
    listing = list_releases(dist, local=local, extra=extra)
    versions = listing.versions(pre=pre)
    if not versions:
        why = "; ".join(f"{k}: {v}" for k, v in listing.problems.items()) or f"asked {', '.join(listing.asked)}"
        raise InputError(f"no {dist} releases found on the indexes pip uses ({why}); check pip's index settings (pip config list)")
    return versions[::-1]
