"""A box's own control group: its memory and its processes counted for the box as a whole.

Per-process rlimits cannot bound a box: three processes each under the address-space limit,
plus three full tmpfs, hold several times the limit between them; and as root,
RLIMIT_NPROC counts every process of uid 65534 on the machine, so two graders share one
budget. A control group counts the box: every process in it, and the tmpfs pages they
write (shared memory is charged to the group that touched it).

`BoxGroup.make(memory_bytes, processes)` makes one group per box under the grader's own
group, with `memory` (its limit; swap not on top, where the kernel counts it) and `pids`;
the box's first process joins it before it execs (`join`, in the `preexec_fn`), so
everything the box starts is inside from the start. `close()` kills what is left in it and
removes it. Over its limit, the kernel's OOM killer ends a process of that box only.

Where a group can be made: cgroup v1's `memory` and `pids` hierarchies writable by this
user (root, usually), or a cgroup v2 group of this process delegated with both controllers
on. Elsewhere (`where()` says why) the box keeps its per-process limits, and the grader's
header says which is in force.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import secrets
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
_counter = itertools.count()


def _own_paths() -> dict[str, str]:
    """This process's group per hierarchy ('memory', 'pids', or '' for cgroup v2)."""
    found: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            for name in controllers.split(",") if controllers else [""]:
                found[name] = path
    return found


def _v1_parents() -> tuple[Path, Path] | str:
    own = _own_paths()
    parents = []
    for name in ("memory", "pids"):
        mount = CGROUP_ROOT / name
        if name not in own or not (mount / "cgroup.procs").exists():
            return f"no cgroup v1 '{name}' hierarchy at {mount}"
        parents.append(mount / own[name].lstrip("/"))
    return parents[0], parents[1]


def _v2_parent() -> Path | str:
    own = _own_paths()
    if "" not in own:
        return "no cgroup v2 group"
    for mount in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        parent = mount / own[""].lstrip("/")
        try:
            enabled = (parent / "cgroup.subtree_control").read_text().split()
        except OSError:
            continue
        if {"memory", "pids"} <= set(enabled):
            return parent
        return (f"cgroup v2 at {parent} does not delegate memory and pids to its children "
                f"(cgroup.subtree_control: {' '.join(enabled) or 'empty'})")
    return "no cgroup v2 mount"


@dataclass(frozen=True)
class BoxGroup:
    """One box's group: its folders (one per hierarchy) and how they count."""

    folders: tuple[Path, ...]
    version: int  # 1 or 2
    memory_bytes: int

    @classmethod
    def make(cls, memory_bytes: int, processes: int) -> BoxGroup | None:
        """A new group allowing `memory_bytes` (bytes, the whole box) and `processes` (tasks,
        threads included); None where none can be made here (see `where`)."""
        parents = _parents()
        if isinstance(parents, str):
            return None
        return cls.make_in(parents, memory_bytes, processes)

    @classmethod
    def make_in(cls, parents: tuple[Path, ...], memory_bytes: int, processes: int
                ) -> BoxGroup:
        """A new group below `parents` (one folder: cgroup v2; memory's and pids': v1)."""
        name = f"dpsim-box-{os.getpid()}-{next(_counter)}-{secrets.token_hex(4)}"
        version = 2 if len(parents) == 1 else 1
        folders = tuple(p / name for p in parents)
        made: list[Path] = []
        try:
            for folder in folders:
                folder.mkdir()
                made.append(folder)
            if version == 1:
                memory, pids = folders
                (memory / "memory.limit_in_bytes").write_text(str(memory_bytes))
                if (memory / "memory.memsw.limit_in_bytes").exists():  # swap not on top
                    (memory / "memory.memsw.limit_in_bytes").write_text(str(memory_bytes))
                (pids / "pids.max").write_text(str(processes))
            else:
                (folders[0] / "memory.max").write_text(str(memory_bytes))
                (folders[0] / "memory.swap.max").write_text("0")
                (folders[0] / "pids.max").write_text(str(processes))
        except OSError:
            for folder in made:
                with contextlib.suppress(OSError):
                    folder.rmdir()
            raise
        return cls(folders, version, memory_bytes)

    def join(self) -> None:
        """Put the calling process in the group (run in the box's first process, before it
        execs: everything it starts is inside)."""
        pid = str(os.getpid())
        for folder in self.folders:
            with open(folder / "cgroup.procs", "w") as f:
                f.write(pid)

    def members(self) -> list[int]:
        """The processes in the group now."""
        found: set[int] = set()
        for folder in self.folders:
            with contextlib.suppress(OSError):
                found |= {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        return sorted(found)

    def peak_bytes(self) -> int | None:
        """The most memory the box held at once (bytes), where the kernel says."""
        name = "memory.max_usage_in_bytes" if self.version == 1 else "memory.peak"
        try:
            return int((self.folders[0] / name).read_text())
        except (OSError, ValueError):
            return None

    def oom_kills(self) -> int:
        """How many of the box's processes the kernel killed for its memory limit."""
        name = "memory.oom_control" if self.version == 1 else "memory.events"
        with contextlib.suppress(OSError, ValueError):
            for line in (self.folders[0] / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def finish(self, box: str) -> str | None:
        """Close the group; a note when the kernel ended a process of `box` (its name in the
        note, e.g. "notebook's") for the box's memory limit, else None."""
        note = (f"the {box} box reached its memory limit ({self.memory_bytes / 2**30:g} GiB "
                "for the whole box); the kernel ended a process in it"
                if self.oom_kills() else None)
        self.close()
        return note

    def close(self) -> None:
        """Kill what is left in the group and remove it (within about 5 s)."""
        deadline = time.monotonic() + 5
        for folder in self.folders:
            while True:
                for pid in self.members():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    folder.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)


@functools.cache
def _parents() -> tuple[Path, ...] | str:
    """Where this process can make a box's group, or why it cannot (tried once)."""
    v2 = _v2_parent()
    v1 = _v1_parents()
    candidates: list[tuple[Path, ...]] = []
    if not isinstance(v2, str):
        candidates.append((v2,))
    if not isinstance(v1, str):
        candidates.append(v1)
    for parents in candidates:
        try:
            probe = BoxGroup.make_in(parents, 2**30, 16)
        except OSError:
            continue
        probe.close()
        return parents
    reasons = [r for r in (v1, v2) if isinstance(r, str)]
    return "; ".join(reasons) or "the cgroup hierarchies here are not writable by this user"


def where() -> str | None:
    """Why no box group can be made here, or None when one can."""
    found = _parents()
    return found if isinstance(found, str) else None
