"""A package's own statement of the release range it needs and what it found: read by the evidence (quoted for a
verdict) and by the call boundary (the requirer and the required package), so it lives apart from both."""

from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion

#: A release bound: a version, or the tuple (or list) a package's version compare prints (`(1, 3, 13, 0, 0, 0)`, `[1, 3, 7]`).
_BOUND = r"(?:\d[\w.*]*|\(\d+(?:,\s*\d+)*\)|\[\d+(?:,\s*\d+)*\])"
_TUPLE = re.compile(r"[(\[](\d+(?:,\s*\d+)*)[)\]]")


def _untuple(spec: str) -> str:
    """A spec's tuple bounds as versions, trailing zeros dropped (`>=(1, 3, 13, 0, 0, 0)` → `>=1.3.13`)."""

    def version(m: re.Match[str]) -> str:
        parts = [p.strip() for p in m.group(1).split(",")]
        while len(parts) > 2 and parts[-1] == "0":
            parts.pop()
        return ".".join(parts)

    return _TUPLE.sub(version, spec)


#: A package's statement of what it needs and what it found, in the forms packages print it: pip's resolver (`trl 0.19.1
#: requires transformers>=4.46.0, but you have transformers 4.44.2`; pip < 20.3: `has requirement …, but you'll have …`),
#: transformers' dependency check (`huggingface-hub>=0.34.0,
#: <1.0 is required for a normal functioning of this module, but found huggingface-hub==1.2.3`), a trainer's range (`supports
#: vLLM versions from 0.22.0 to 0.31.0. You have 0.32.0`), an example's minimum version, and the plain `requires X>=N ... but ... N`.
_RANGES = (
    re.compile(
        r"(?P<who>[\w.-]+) v?[\d.]+\w* (?:requires|has requirement) (?P<pkg>[\w.-]+)(?P<spec>[<>=!~]=?[^,\s]+(?:,[<>=!~]=?[^,\s]+)*), "
        r"but you(?:'ll| will)? have (?:[\w.-]+ )?(?P<found>v?\d[\w.+]*)"
    ),
    re.compile(
        r"(?P<pkg>[\w.-]+)\s*(?P<spec>[<>=!~]=?\s*\d[\w.*]*(?:\s*,\s*[<>=!~]=?\s*\d[\w.*]*)*)\s+(?:is|are)\s+required\b"
        r".{0,200}?\bbut\s+(?:found|got|you have)\s+(?:[\w.-]+\s*={1,2}\s*)?(?P<found>v?\d[\w.+]*)",
        re.I,
    ),
    re.compile(
        r"(?:(?P<who>[\w.-]+)\s+(?:currently\s+)?(?:only\s+)?)?supports?\s+(?P<pkg>[\w.-]+)\s+versions?\s+(?:from\s+)?(?P<lo>v?\d[\w.]*)\s+(?:to|through|-)\s+(?P<hi>v?\d[\w.]*)"
        r".{0,120}?(?:you have|found|installed)\s+(?:version\s+)?(?P<found>v?\d[\w.+]*)",
        re.I,
    ),
    re.compile(
        r"(?:(?P<who>[\w.-]+)\s+(?:currently\s+)?(?:only\s+)?)?supports?\s+(?P<pkg>[\w.-]+)\s+versions?:?\s+`?(?P<list>v?\d[\w.]*(?:`?,\s*`?v?\d[\w.]*)*)`?"
        r".{0,80}?(?:you have|found|installed)\s+(?:version\s+)?(?P<found>v?\d[\w.+]*)",
        re.I,
    ),
    # transformers' and diffusers' check_min_version: `This example requires a minimum version of 4.40.0, but the version
    # found is 4.39.1` / `requires a source install from HuggingFace Transformers (see …), but the version found is …`
    re.compile(
        r"requires a (?:minimum version of (?:(?P<named>[A-Za-z][\w.-]*) )?(?P<min>v?\d[\w.]*)|source install from (?:HuggingFace |🤗 )?"
        r"(?P<src>[A-Za-z][\w-]*))\b.{0,240}?\bbut the version found is (?P<found>v?\d[\w.+]*)",
        re.I,
    ),
    re.compile(
        r"(?:(?<![A-Za-z0-9_.-])(?!(?i:it|this|that|which|also|now|still|model|example|script|code|project|version|and|or)\s)(?P<who>[A-Za-z][A-Za-z0-9_.-]*)\s+)?requires?\s+(?P<pkg>[A-Za-z][\w.-]*)\s*(?P<spec>[<>=!~]=?\s*\d[\w.*]*(?:\s*,\s*[<>=!~]=?\s*\d[\w.*]*)*)"
        r".{0,160}?\b(?:but|you have|found|installed|got)\b.{0,60}?(?P<found>\d+\.\d[\w.+]*)",
        re.I,
    ),
    # pkg_resources (a console script's or a package's own `require()`): the release range a distribution's metadata needs
    # where none installed satisfies it (`The 'transformers<=4.48.3,>=4.41.2' distribution was not found and is required by
    # llamafactory`), or the release installed and the requirement it conflicts with (`(transformers 4.49.0 (/usr/lib/…),
    # Requirement.parse('transformers<=4.48.3'), {'llamafactory'})`)
    re.compile(
        r"The ['\"](?P<pkg>[A-Za-z][\w.-]*)(?:\[[\w,.-]*\])?(?P<spec>[<>=!~]=?[^'\"\s]*)['\"] distribution was not found and is required by "
        r"(?P<who>[A-Za-z][\w.-]*)"
    ),
    re.compile(
        r"\((?P<pkg>[A-Za-z][\w.-]*) (?P<found>v?\d[\w.+]*) \([^)\n]*\), Requirement\.parse\(['\"][A-Za-z][\w.-]*(?:\[[\w,.-]*\])?"
        r"(?P<spec>[<>=!~]=?[^'\"\s]*)['\"]\)(?:, \{['\"](?P<who>[A-Za-z][\w.-]*)['\"])?"
    ),
    # a package's own import-time check naming the release it found and the range to install (mmdet: `MMCV==2.2.0 is used
    # but incompatible. Please install mmcv>=2.0.0rc4, <2.2.0.`; older OpenMMLab releases print the bounds as the tuples
    # their digit_version compares: `mmcv>=(1, 3, 13, 0, 0, 0), <(1, 7, 0, 0, 0, 0)`)
    re.compile(
        r"[A-Za-z][\w.-]*\s*==\s*(?P<found>v?\d[\w.+]*?)\.?\s+is\s+(?:used|installed)\s*,?\s+but\s+(?:it\s+is\s+)?incompatible\b.{0,80}?"
        rf"\binstall\s+(?P<pkg>[A-Za-z][\w.-]*)\s*(?P<spec>[<>=!~]=?\s*{_BOUND}(?:\s*,\s*[<>=!~]=?\s*{_BOUND})*)",
        re.I,
    ),
    # a package's check of its companion (jax: `jaxlib is version 0.1.69, but this version of jax requires version 0.1.74.`):
    # the release it names is the least it takes
    re.compile(
        r"(?P<pkg>[A-Za-z][\w.-]*) (?:is (?:at )?version|version is) (?P<found>v?\d[\w.+]*?),? but this version of (?P<who>[A-Za-z][\w.-]*) requires "
        r"(?:at least |a minimum )?(?:version )?(?:>=\s*)?(?P<least>v?\d[\w.]*\d)",
        re.I,
    ),
    # a package's check of a framework it builds on, naming the series it was built for (Open3D: `Version mismatch: Open3D
    # needs PyTorch version 1.12.*, but version 1.10.1 is installed!`)
    re.compile(
        r"(?P<who>[A-Za-z][\w.-]*) needs (?P<pkg>[A-Za-z][\w.-]*) version (?P<list>v?\d[\w.]*\*?),? but (?:version )?(?P<found>v?\d[\w.+]*?)"
        r" is installed",
        re.I,
    ),
    # optimum's check of a library it builds on (`Found an incompatible version of auto-gptq. Found version 0.4.2, but only
    # version above 0.4.99 are supported`)
    re.compile(
        r"incompatible version of (?P<pkg>[A-Za-z][\w-]*(?:\.[\w-]+)*)\.?\s+Found version (?P<found>v?\d[\w.+]*?),? but only versions? "
        r"(?:above|greater than|>=?|from) (?P<least>v?\d[\w.]*\d)",
        re.I,
    ),
    # jax's check of its compiled companion from the other side (`jaxlib version 0.4.14 is newer than and incompatible with jax
    # version 0.4.6`): what the checker takes is no newer (no older) than its own release
    re.compile(
        r"(?P<pkg>[A-Za-z][\w.-]*) version (?P<found>v?\d[\w.+]*?) is (?P<way>newer|older) than and incompatible with "
        r"(?P<who>[A-Za-z][\w.-]*) version (?P<bound>v?\d[\w.]*\d)",
        re.I,
    ),
    # a package refusing a major release it was not written for (transformers: `Your currently installed version of Keras
    # is Keras 3, but this is not yet supported in Transformers`): any release but that one
    re.compile(
        r"installed version of (?P<pkg>[A-Za-z][\w.-]*) is (?:[A-Za-z][\w.-]* )?(?P<major>v?\d+)(?:\.\d[\w.]*)?,? but (?:this|it) is not "
        r"(?:yet )?supported (?:in|by) (?P<who>[A-Za-z][\w-]*(?:\.[\w-]+)*)",
        re.I,
    ),
    # a refusal of the releases from one on (LAVIS: `BLIP models are not compatible with transformers>=4.27, run pip install
    # transformers==4.25 to downgrade`): what is needed is what that spec excludes
    re.compile(
        r"(?:are|is) (?:not|in) ?compatible with (?P<pkg>[A-Za-z][\w.-]*)\s*(?P<excluded>(?:>=?|<=?)\s*v?\d[\w.]*\d)",
        re.I,
    ),
    # JAX's check of the cuDNN it loads (`Found cuDNN version 8600, but JAX was built against version 8906, which is newer`;
    # `Outdated cuDNN installation found. Version JAX was built against: 8907 Minimum supported: 9100 Installed version: 8907`)
    re.compile(
        r"Found (?P<pkg>cuDNN|cuBLAS|cuSPARSE|cuFFT|cuSOLVER|NCCL|CUDA) version (?P<found>\d+),? but (?P<who>JAX|jaxlib|[A-Za-z]\w*) was built against"
        r" version (?P<least>\d+)",
        re.I,
    ),
    re.compile(
        r"Outdated (?P<pkg>cuDNN|cuBLAS|cuSPARSE|cuFFT|cuSOLVER|NCCL) installation found\.?\s*(?:Version (?P<who>[A-Za-z]\w*) was built"
        r" against:\s*\d+\s+)?Minimum supported:\s*(?P<least>\d+)\s+Installed version:\s*(?P<found>\d+)",
        re.I,
    ),
    # sglang's own check: `sgl-kernel is installed with version 0.1.0, which is less than the minimum required version 0.1.1`
    re.compile(
        r"(?P<pkg>[A-Za-z][\w.-]*) is installed with version (?P<found>v?\d[\w.+]*?),? which is (?:less|lower|older) than the "
        r"minimum (?:required )?version (?P<least>v?\d[\w.]*)",
        re.I,
    ),
)


#: Lines of an exception's message read for a range statement.
MESSAGE_LINES = 4


@dataclass(frozen=True)
class Range:
    """What a package says another must be (`spec`, or `lo`…`hi`) and what is installed (`found`), and who said it."""

    package: str
    needed: str
    found: str
    said_by: str
    line: str

    @property
    def violated(self) -> bool:
        """The installed release is outside what is needed (a spec it does not satisfy); a range given in words (`from A
        to B`, `one of`) or a release that does not parse counts as stated, so as violated."""
        try:
            return not SpecifierSet(self.needed).contains(self.found.lstrip("v"), prereleases=True)
        except (InvalidSpecifier, InvalidVersion):
            return True

    def text(self) -> str:
        who = f"{self.said_by} says " if self.said_by else ""
        return f"{who}{self.package} {self.needed} is needed, " + (f"{self.found} is installed" if self.found else "no installed release satisfies it")


def read_range(text: str) -> Range | None:
    """The first range statement in a text, None when it holds none."""
    for pattern in _RANGES:
        if m := pattern.search(text):
            groups = m.groupdict()
            if "src" in groups:  # check_min_version: the package is named, or is the one whose frame raised ('')
                package = (groups.get("named") or groups.get("src") or "").lower()
                needed = f">={groups['min'].rstrip('.')}" if groups.get("min") else f">{groups['found'].rstrip('.')}"  # a source install
                return Range(package, needed, groups["found"].rstrip("."), "", text.strip()[:400])
            if groups.get("way"):  # no newer (older) than the checker's own release
                needed = f"{'<=' if groups['way'].lower() == 'newer' else '>='}{groups['bound']}"
                return Range(groups["pkg"], needed, groups["found"].rstrip("."), groups.get("who") or "", text.strip()[:400])
            if groups.get("major"):  # any release but the refused major one
                major = groups["major"].lstrip("v")
                return Range(groups["pkg"], f"!={major}.*", major, groups.get("who") or "", text.strip()[:400])
            if groups.get("excluded"):  # the releases a refused spec leaves out
                op, bound = re.match(r"([<>]=?)\s*v?(.*)", groups["excluded"]).groups()  # type: ignore[union-attr]
                needed = {">=": "<", ">": "<=", "<=": ">", "<": ">="}[op] + bound
                return Range(groups["pkg"], needed, "", groups.get("who") or "", text.strip()[:400])
            if groups.get("least"):
                needed = f">={groups['least'].rstrip('.')}"
                return Range(groups["pkg"], needed, groups["found"].rstrip("."), groups.get("who") or "", text.strip()[:400])
            if groups.get("spec"):
                needed = _untuple(groups["spec"]).replace(" ", "").rstrip(".")  # a sentence's full stop
            elif groups.get("lo"):
                needed = f"{groups['lo'].rstrip('.')} to {groups['hi'].rstrip('.')}"
            elif "," in groups["list"]:
                needed = "one of " + groups["list"].replace("`", "").rstrip(".")
            else:
                needed = "==" + groups["list"].rstrip(".")
            return Range(groups["pkg"], needed, (groups.get("found") or "").rstrip("."), groups.get("who") or "", text.strip()[:400])
    return None


def in_message(value: str) -> Range | None:
    """The range an exception's message states, in its first paragraph (up to MESSAGE_LINES lines, joined: a terminal or a
    pasted quote wraps it, and a wrapper announces its cause on the next line: transformers' `Failed to import X because
    of the following error (look up to see its traceback):`); what follows a blank line is another text (a hint, a
    quoted traceback)."""
    lines = value.split("\n\n", 1)[0].split("\n")[:MESSAGE_LINES]
    return read_range(" ".join(line.strip() for line in lines))
