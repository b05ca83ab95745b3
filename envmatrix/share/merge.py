"""Where `report` and `lock` get their records: results folders as always, and published sites (a folder
holding index.json, or an http(s) URL), each record with its provenance."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from ..errors import InputError
from ..records.provenance import Merged, Sourced, from_folders
from .fetch import FolderSite, HttpSite, is_url
from .keys import PublicKey
from .limits import Limits
from .site import INDEX, read_site

Warn = Callable[[str], None]


def check_sources(sources: list[str]) -> None:
    """Every source is an http(s) URL or an existing folder; InputError naming the others."""
    odd = [s for s in sources if "://" in s and not is_url(s)]
    if odd:
        raise InputError(f"--results {', '.join(odd)}: only http:// and https:// sites are read; for a local site pass its folder")
    missing = [s for s in sources if not is_url(s) and not Path(s).is_dir()]
    if missing:
        raise InputError(f"no such results folder: {', '.join(missing)}; run the matrix first (nox -s matrix) or pass --results DIR or a site's URL")
    for s in sources:
        if is_url(s) and not urlsplit(s).hostname:
            raise InputError(f"--results {s}: no host in this URL")


def gather(sources: list[str], trusted: list[PublicKey], warn: Warn, limits: Limits | None = None) -> Merged:
    """The records of every source, in order (a later source's record of a cell wins), with what could not be read."""
    check_sources(sources)
    limits = limits or Limits()
    rows: list[Sourced] = []
    problems: list[str] = []
    named = {urlsplit(s).hostname or "" for s in sources if is_url(s)} - {""}  # a redirect may reach these
    for source in sources:
        if is_url(source):
            got, trouble = read_site(HttpSite(source, limits, named), trusted, limits, warn)
        elif (Path(source) / INDEX).is_file():
            got, trouble = read_site(FolderSite(Path(source), limits), trusted, limits, warn)
        else:
            got, trouble = list(from_folders([Path(source)], warn).rows), []
        rows += got
        problems += trouble
    return Merged(tuple(rows), tuple(k.keyid for k in trusted), tuple(problems))
