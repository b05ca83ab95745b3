"""Lock round trip: a lock written from a record's freeze installs with --require-hashes, same versions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from records_factory import make_record

from envmatrix.errors import InputError
from envmatrix.outputs.lock import write_lock

pytestmark = pytest.mark.integration

PINS = ["six==1.16.0", "iniconfig==2.0.0", "idna==3.7"]


def test_lock_installs_with_require_hashes(tmp_path: Path) -> None:
    records = [make_record("ok", freeze=PINS), make_record("zero_grad", scenario="ctl", expect="zero_grad", freeze=PINS)]
    folder = write_lock(records, tmp_path, env_id=records[0].env)
    lock = (folder / "requirements.lock").read_text()
    assert lock.count("--hash=sha256:") == 3
    import tomllib

    pylock = tomllib.loads((folder / "pylock.toml").read_text())
    assert pylock["lock-version"] == "1.0" and {p["name"] for p in pylock["packages"]} == {"six", "iniconfig", "idna"}
    assert all(len(p["wheels"][0]["hashes"]["sha256"]) == 64 for p in pylock["packages"])
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "install", "--quiet", "--require-hashes", "-r", str(folder / "requirements.lock")], check=True, timeout=600)
    frozen = subprocess.run([*pip, "freeze"], capture_output=True, text=True, check=True).stdout.split()
    assert sorted(frozen) == sorted(PINS)


def test_pylock_with_the_attestations_it_stands_on_installs_with_uv(tmp_path: Path) -> None:
    """The [tool.envmatrix] table (what the environment is vetted for, the attestations by digest) is a
    PEP 751 tool table: uv reads the lock and plans the same pins."""
    from uv import find_uv_bin

    from envmatrix.records.provenance import Provenance

    records = [make_record("ok", freeze=PINS[:1]), make_record("zero_grad", scenario="ctl", expect="zero_grad", freeze=PINS[:1])]
    signed = {r.id: Provenance("https://a.example/", verified=True, signer="ab" * 32, attestation_sha256=f"{i}" * 64) for i, r in enumerate(records)}
    folder = write_lock(records, tmp_path, env_id=records[0].env, provenance=signed)
    import tomllib

    tool = tomllib.loads((folder / "pylock.toml").read_text())["tool"]["envmatrix"]
    assert tool["vetted-for"] == ["fp32-sdpa"] and tool["controls-reproduced"] == ["ctl"]
    assert sorted(a["sha256"] for a in tool["attestations"]) == ["0" * 64, "1" * 64]
    uv = str(find_uv_bin())
    subprocess.run([uv, "venv", "--quiet", str(tmp_path / "venv")], check=True, timeout=120)
    env = {**os.environ, "VIRTUAL_ENV": str(tmp_path / "venv")}
    plan = subprocess.run([uv, "pip", "install", "--dry-run", "-r", str(folder / "pylock.toml")], capture_output=True, text=True, env=env, timeout=600)
    assert plan.returncode == 0 and "six==1.16.0" in plan.stderr, plan.stderr


def test_tampered_lock_is_refused(tmp_path: Path) -> None:
    records = [make_record("ok", freeze=PINS[:1]), make_record("zero_grad", scenario="ctl", expect="zero_grad", freeze=PINS[:1])]
    folder = write_lock(records, tmp_path, env_id=records[0].env)
    lock = folder / "requirements.lock"
    text = lock.read_text()
    digest = text.split("sha256:")[1].split()[0]
    lock.write_text(text.replace(digest, "0" * 64))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    got = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--require-hashes", "-r", str(lock)], capture_output=True, text=True)
    assert got.returncode != 0 and "DO NOT MATCH" in got.stderr.upper()


def test_unvetted_and_unknown_environments_are_refused(tmp_path: Path) -> None:
    records = [make_record("nan_loss", freeze=PINS)]
    with pytest.raises(InputError, match="is vetted for nothing: no healthy scenario was ok here"):
        write_lock(records, tmp_path, env_id=records[0].env)
    with pytest.raises(InputError, match="is vetted for nothing: no control reproduced on its detector stack"):
        write_lock([make_record("ok", freeze=PINS)], tmp_path, env_id=records[0].env)
    with pytest.raises(InputError, match="no records of a cell that ran in this environment"):
        write_lock(records, tmp_path, env_id="cu999-nothing")
    with pytest.raises(InputError, match="no environment ran on H20"):
        write_lock(records, tmp_path, best_gpu="H20")
    with pytest.raises(InputError, match=r"no environment is vetted for fp32-sdpa: cu124-\S+: no healthy scenario was ok here"):
        write_lock(records, tmp_path, best_gpu="A100")
