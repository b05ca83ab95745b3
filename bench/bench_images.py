"""Pulled size of each base image a profile's environments are built on, against the cudnn-devel image of the
same CUDA version: the compressed layers a GPU runner downloads, read from the registry's manifest API
(Docker Hub's registry-1.docker.io, nvcr.io, ... as the image reference names it; anonymous pull tokens).

    python bench/bench_images.py [--file matrix.yaml] [--profile gpu] [--arch amd64]

No figure is invented: when the registry cannot be reached it says so, with the error, lists the images it
would compare, and exits 1.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from envmatrix.facts import catalog
from envmatrix.plan.builds import builds
from envmatrix.plan.expand import expand
from envmatrix.plan.install import Sources, base_image
from envmatrix.spec.matrix import load

ROOT = Path(__file__).resolve().parent.parent
DOCKER_HUB = "registry-1.docker.io"
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


class RegistryError(Exception):
    """The registry could not be reached, or did not answer with a manifest."""


def parse_ref(ref: str) -> tuple[str, str, str]:
    """(registry host, repository, tag) as docker reads a reference: no host is Docker Hub, where a one-name
    repository is library/NAME."""
    name, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return first, rest, tag
    return DOCKER_HUB, name if "/" in name else f"library/{name}", tag


def _get(url: str, token: str | None) -> Any:
    headers = {"Accept": ACCEPT, **({"Authorization": f"Bearer {token}"} if token else {})}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as answer:
        return json.load(answer)


def _token(challenge: str, repo: str) -> str:
    """An anonymous pull token from the realm a 401's `WWW-Authenticate: Bearer realm=...` names."""
    fields = dict(re.findall(r'(\w+)="([^"]*)"', challenge))
    realm = fields.pop("realm", None)
    if realm is None:
        raise RegistryError(f"the registry asked for credentials this bench does not have ({challenge or 'no challenge'})")
    fields.setdefault("scope", f"repository:{repo}:pull")
    with urllib.request.urlopen(f"{realm}?{urllib.parse.urlencode(fields)}", timeout=30) as answer:
        data = json.load(answer)
    return str(data.get("token") or data["access_token"])


def _manifest(host: str, repo: str, ref: str, token: str | None) -> tuple[dict[str, Any], str | None]:
    url = f"https://{host}/v2/{repo}/manifests/{ref}"
    try:
        return _get(url, token), token
    except urllib.error.HTTPError as exc:
        if exc.code != 401 or token is not None:
            raise
        token = _token(exc.headers.get("WWW-Authenticate", ""), repo)
        return _get(url, token), token


def pulled_size(ref: str, arch: str = "amd64") -> int:
    """The compressed size of an image's layers for linux/`arch`: what `docker pull` downloads."""
    host, repo, tag = parse_ref(ref)
    try:
        doc, token = _manifest(host, repo, tag, None)
        if "manifests" in doc:  # a multi-platform index: this platform's manifest
            wanted = [m for m in doc["manifests"] if m.get("platform", {}).get("os") == "linux" and m["platform"].get("architecture") == arch]
            if not wanted:
                raise RegistryError(f"{ref}: no linux/{arch} image in its index")
            doc, _ = _manifest(host, repo, wanted[0]["digest"], token)
        return sum(int(layer["size"]) for layer in doc["layers"])
    except OSError as exc:  # URLError and HTTPError among them
        raise RegistryError(f"could not reach the registry {host} for {ref}: {exc}") from None
    except (ValueError, KeyError) as exc:
        raise RegistryError(f"the registry {host} did not answer with a manifest for {ref}: {type(exc).__name__} {exc}") from None


def pairs(matrix: Path, profile: str) -> dict[str, tuple[str, str]]:
    """The base each of the profile's environments is built on (plan/install.py picks it) → (its CUDA
    version, the cudnn-devel image of that version)."""
    spec = load(matrix)
    sources = Sources.of(spec.profiles[profile], matrix.parent)
    found: dict[str, tuple[str, str]] = {}
    for build in builds(expand(spec, profile)):
        image, devel = base_image(build.env, sources), catalog.base_image(build.env.cuda, toolkit=True, python=build.env.python)
        if image is not None and devel is not None and build.env.cuda != "none":
            found.setdefault(image, (build.env.cuda, devel))
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=ROOT / "matrix.yaml")
    parser.add_argument("--profile", default="gpu")
    parser.add_argument("--arch", default="amd64")
    args = parser.parse_args()
    compare = pairs(args.file, args.profile)
    if not compare:
        print(f"profile '{args.profile}' builds no environment on a CUDA base image")
        return 1
    ordered = sorted(compare.items(), key=lambda kv: kv[1])
    try:
        sizes = [(pulled_size(image, args.arch), pulled_size(devel, args.arch)) for image, (_, devel) in ordered]
    except RegistryError as exc:
        print(exc)
        print("no sizes measured; the images it would compare:")
        for image, (cuda, devel) in ordered:
            print(f"  CUDA {cuda}: {image} against {devel}")
        return 1
    print(f"pulled size (compressed layers, linux/{args.arch}) of the bases of profile '{args.profile}' against cudnn-devel:")
    for (image, (cuda, devel)), (size, devel_size) in zip(ordered, sizes, strict=True):
        print(f"  CUDA {cuda:5} {image:48} {size / 1e9:6.2f} GB   {devel:52} {devel_size / 1e9:6.2f} GB   ({size / devel_size:.0%})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
