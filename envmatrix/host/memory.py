"""How much memory this runner may still use: the host's MemAvailable, or less where its cgroup (a container's, a
Slurm job's) sets a lower limit. Idle fork helpers are evicted when it runs short (run/forkclient.py)."""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63-1


def meminfo_available(text: str) -> int | None:
    """MemAvailable of /proc/meminfo text, in bytes."""
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            fields = line.split()
            return int(fields[1]) * 1024 if len(fields) >= 2 and fields[1].isdigit() else None
    return None


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max" (v2: no limit) is not a number


def cgroup_room(proc_cgroup: str, root: Path = CGROUP_ROOT) -> int | None:
    """Bytes left under this process's cgroup memory limit (v2 memory.max − memory.current, v1 limit − usage), None
    without a limit. The cgroup's folder is looked for at its path under the mount, then at the mount itself (inside
    a container the process's cgroup is the namespace's root)."""
    rooms = []
    for line in proc_cgroup.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            candidates = [(root / path.lstrip("/"), "memory.max", "memory.current"), (root, "memory.max", "memory.current")]
        elif "memory" in controllers.split(","):
            mount = root / "memory"
            names = ("memory.limit_in_bytes", "memory.usage_in_bytes")
            candidates = [(mount / path.lstrip("/"), *names), (mount, *names)]
        else:
            continue
        for folder, limit_name, usage_name in candidates:
            limit, usage = _read_int(folder / limit_name), _read_int(folder / usage_name)
            if limit is not None and usage is not None:
                if limit < UNLIMITED:
                    rooms.append(max(0, limit - usage))
                break
    return min(rooms) if rooms else None


def available() -> int | None:
    """What this runner may still allocate, in bytes: the smaller of MemAvailable and its cgroup's room; None when
    neither can be read (not Linux)."""
    found = []
    try:
        found.append(meminfo_available(Path("/proc/meminfo").read_text()))
        found.append(cgroup_room(Path("/proc/self/cgroup").read_text()))
    except OSError:
        pass
    numbers = [n for n in found if n is not None]
    return min(numbers) if numbers else None
