"""The probe images envmatrix built on an engine: labelled by environment and recipe when built, listed, and
the superseded ones pruned.

Every image the docker backend builds carries `envmatrix.build` (the environment's build id), `envmatrix.recipe`
(a digest of the Dockerfile and its steps: what a change to envmatrix's build changes) and `envmatrix.image=probe`.
An environment's image is rebuilt whenever anything it is built from changes (its tag is a hash of all of it), and
the old one stays: on a GPU profile each is several GB. The newest image of each environment is current; the older
ones of the same environment are superseded. Only images of envmatrix's repository with its labels are ever
removed; one a container still uses is kept (the engine refuses to remove it anyway).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The repository of the probe images: envmatrix-probe:<hash> (backends/docker.py tags with it).
REPOSITORY = "envmatrix-probe"
KIND_LABEL = "envmatrix.image"
BUILD_LABEL = "envmatrix.build"
RECIPE_LABEL = "envmatrix.recipe"


def recipe_digest(dockerfile: Path, steps: Path) -> str:
    """16 hex of the Dockerfile and its step scripts: two images of one environment with different digests were
    built by different versions of envmatrix's build."""
    h = hashlib.sha256(dockerfile.read_bytes())
    for step in sorted(p for p in steps.rglob("*") if p.is_file()):
        h.update(b"\0" + str(step.relative_to(steps)).encode() + b"\0" + step.read_bytes())
    return h.hexdigest()[:16]


def labels(build_id: str, recipe: str) -> dict[str, str]:
    """The labels a probe image is built with."""
    return {KIND_LABEL: "probe", BUILD_LABEL: build_id, RECIPE_LABEL: recipe}


@dataclass(frozen=True)
class ProbeImage:
    """One image of envmatrix's repository on this engine, and what becomes of it."""

    tag: str
    image_id: str
    build_id: str | None  # None: built before images were labelled (no environment known)
    recipe: str | None
    created: str
    size: int
    in_use: bool
    state: str  # current | superseded | unlabelled

    def as_dict(self) -> dict[str, object]:
        return {
            "tag": self.tag,
            "id": self.image_id,
            "build_id": self.build_id,
            "recipe": self.recipe,
            "created": self.created,
            "size": self.size,
            "in_use": self.in_use,
            "state": self.state,
        }


def _used_image_ids(client: Any) -> set[str]:
    return {str(c.attrs.get("Image", "")) for c in client.containers.list(all=True)}


def probe_images(client: Any, repository: str | None = None) -> list[ProbeImage]:
    """Every image of envmatrix's repository, each with its state: the newest of an environment is current, older
    ones superseded; an image without labels is `unlabelled` (never pruned: its environment is unknown)."""
    repository = repository or REPOSITORY
    used = _used_image_ids(client)
    found: list[tuple[str, str, dict[str, str], str, int]] = []
    for image in client.images.list(name=repository):
        attrs = image.attrs or {}
        tags = [t for t in image.tags if t.startswith(repository + ":")]
        if not tags:
            continue
        found.append((tags[0], str(image.id), (attrs.get("Config") or {}).get("Labels") or {}, str(attrs.get("Created", "")), int(attrs.get("Size") or 0)))
    newest: dict[str, str] = {}
    for tag, _, lab, _created, _ in sorted(found, key=lambda f: f[3]):
        if lab.get(KIND_LABEL) == "probe" and lab.get(BUILD_LABEL):
            newest[lab[BUILD_LABEL]] = tag
    out = []
    for tag, image_id, lab, created, size in sorted(found, key=lambda f: (f[2].get(BUILD_LABEL, "~"), f[3])):
        build = lab.get(BUILD_LABEL) if lab.get(KIND_LABEL) == "probe" else None
        state = "unlabelled" if not build else "current" if newest.get(build) == tag else "superseded"
        out.append(ProbeImage(tag, image_id, build, lab.get(RECIPE_LABEL), created, size, image_id in used, state))
    return out


@dataclass(frozen=True)
class Pruned:
    """What a prune removed (or would remove, dry run), what it kept because a container uses it, and the bytes."""

    removed: list[ProbeImage]
    kept_in_use: list[ProbeImage]
    failed: list[tuple[ProbeImage, str]]

    @property
    def freed(self) -> int:
        return sum(i.size for i in self.removed)


def prune(client: Any, *, dry_run: bool, repository: str | None = None) -> Pruned:
    """Remove every superseded probe image no container uses (dry run: say which, remove nothing)."""
    from docker.errors import APIError

    removed, kept, failed = [], [], []
    for image in probe_images(client, repository):
        if image.state != "superseded":
            continue
        if image.in_use:
            kept.append(image)
            continue
        if not dry_run:
            try:
                client.images.remove(image.tag, noprune=False)
            except APIError as exc:
                failed.append((image, str(exc.explanation or exc)))
                continue
        removed.append(image)
    return Pruned(removed, kept, failed)


def previous_size(client: Any, build_id: str) -> int | None:
    """The bytes the newest existing image of this environment added over its base (its own layers), None if
    there is none: the best estimate of what rebuilding it will take."""
    from docker.errors import ImageNotFound

    for image in reversed(probe_images(client)):
        if image.build_id == build_id:
            try:
                attrs = client.images.get(image.tag).attrs
                history = client.api.history(image.tag)
            except ImageNotFound:
                return None
            # the layers above the base image: history rows until the first that another image (the base) owns
            own = 0
            for row in history:
                if row.get("Tags") and image.tag not in row["Tags"]:
                    break
                own += int(row.get("Size") or 0)
            return own or int(attrs.get("Size") or 0)
    return None
