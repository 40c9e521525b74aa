"""One notebook's OS-level sandbox: bubblewrap namespaces, an unprivileged user, hard limits.

`command(argv, lib, env, limits)` wraps a command line so that it runs in a box of its own:

- its own PID namespace: it sees only its own processes, and when the box's first process
  dies (the grader kills it, or `--die-with-parent` when the grader dies) every process in
  it dies too, however it forked, `setsid`-ed or re-exec'd;
- its own network namespace (loopback only: gloo ranks and the Jupyter kernel talk over
  127.0.0.1 inside the box; nothing leaves it), its own IPC and UTS namespaces;
- as uid/gid 65534 (nobody), with no capabilities and `no_new_privs`;
- a file system built from an explicit list: the system (`/usr`, `/bin`, `/lib*`),
  Python and its packages (the interpreter's prefix and the virtual environment), and
  the grader's verified copy of dpsim at `/opt/dpsim`, all read-only; an empty,
  size-capped tmpfs as the working folder (`/home/learner`), `/tmp` and `/dev/shm`; a
  `/proc` of the box's own processes. Other submissions, the output folder, the grader's
  files and environment (the grading secret) are not there;
- its own control group where one can be made (`box_group`): memory (tmpfs included) and
  processes counted for the box as a whole; elsewhere, and besides, rlimits set before the
  box starts and inherited by everything in it: address space per process, number of
  processes of uid 65534 (only without a group), CPU seconds per process, file size;
- a seccomp filter (`box_seccomp`, x86-64) refusing new namespaces, ptrace and the kernel's
  less-travelled calls;
- no new user namespaces (`unshare -Ur` fails): bwrap's `--disable-userns` (bubblewrap 0.8
  or later), which needs a user namespace of the box's own. As another user the box has
  one; as root the box's uid must stay the real uid 65534 (so the process limit counts it),
  so a second bwrap, started as uid 65534 after `setpriv`, makes one mapping 65534 to
  itself and disables further ones. `hardening()` says which of these is in force, and why
  not where the host's bubblewrap cannot.

Why bubblewrap: one small, well-kept program (Flatpak's sandbox; Debian package
`bubblewrap`) builds all of the above in one command, from a list of mounts, with no
daemon and no image. Docker or podman need a daemon or an image per run; plain `unshare`
would need the mounts written by hand. As root, bwrap keeps CAP_SETUID/SETGID for
`setpriv`, which drops to uid 65534 for real (so the process limit counts); as another
user, bwrap maps uid 65534 in a user namespace of its own.
"""

from __future__ import annotations

import functools
import os
import platform
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from dpsim.course.grading import box_group, box_seccomp
from dpsim.course.grading.box_group import BoxGroup

BOX_LIB = "/opt/dpsim"  # where the verified copy of dpsim appears inside
BOX_HOME = "/home/learner"  # the empty working folder inside
BOX_UID = 65534
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_HOSTS = "127.0.0.1 localhost dpsim-box\n::1 localhost\n"
SECCOMP_FILE = "seccomp.bpf"
_SECCOMP_FD = 9  # the descriptor the last bwrap reads its filter from
_PASSWD = f"learner:x:{BOX_UID}:{BOX_UID}:learner:{BOX_HOME}:/bin/sh\n"


@dataclass(frozen=True)
class BoxLimits:
    """What one box may use: bytes per process, processes, bytes per tmpfs, CPU seconds."""

    memory_bytes: int = 8 * 2**30  # address space of each process (RLIMIT_AS)
    processes: int = 512  # processes of uid 65534 (RLIMIT_NPROC)
    disk_bytes: int = 2**30  # size of each tmpfs (working folder, /tmp, /dev/shm)
    cpu_s: int = 3600  # CPU time of each process (RLIMIT_CPU)

    @property
    def tmpfs_bytes(self) -> int:
        """Size of each of the three tmpfs: `disk_bytes`, but the three together at most half
        of `memory_bytes` (a tmpfs is held in memory, so it counts in the memory budget)."""
        return max(2**20, min(self.disk_bytes, self.memory_bytes // 6))

    def describe(self) -> str:
        """The memory and process limits in force, and what they do not bound."""
        why_not = box_group.where()
        if why_not is None:
            return (f"limits per box (a control group each): {self.memory_bytes / 2**30:g} "
                    f"GiB of memory for the whole box, its tmpfs included, and at most "
                    f"{self.processes} processes and threads in it; besides, address space "
                    f"{self.memory_bytes / 2**30:g} GiB per process (RLIMIT_AS) and three "
                    f"tmpfs of {self.tmpfs_bytes / 2**20:g} MiB each")
        return (f"limits per process, not per box (no control group: {why_not}): address space "
                f"{self.memory_bytes / 2**30:g} GiB each (RLIMIT_AS), at most "
                f"{self.processes} processes of uid {BOX_UID} (RLIMIT_NPROC"
                + (", counted over every process of that uid on this machine"
                   if os.geteuid() == 0 else "") +
                f"), three tmpfs of {self.tmpfs_bytes / 2**20:g} MiB each (at most half "
                "the memory limit together)")


def _bwrap() -> str | None:
    return shutil.which("bwrap")


def _setpriv() -> str | None:
    return shutil.which("setpriv")


@functools.cache
def _bwrap_options() -> str:
    try:
        return subprocess.run([_bwrap() or "bwrap", "--help"], capture_output=True,
                              timeout=30).stdout.decode(errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""


def _bwrap_version() -> str:
    try:
        return subprocess.run([_bwrap() or "bwrap", "--version"], capture_output=True,
                              timeout=30).stdout.decode(errors="replace").strip()
    except (OSError, subprocess.TimeoutExpired):
        return "an unknown version"


def _inner_userns_guard(seccomp: list[str]) -> list[str]:
    """As root: the second bwrap that gives the box a user namespace and disables more."""
    return [_bwrap() or "bwrap", "--unshare-user", "--uid", str(BOX_UID), "--gid",
            str(BOX_UID), "--disable-userns", *seccomp, "--dev-bind", "/", "/", "--"]


@functools.cache
def _userns_guard() -> tuple[bool, str]:
    """(whether the box disables user namespaces, a line saying so or why not)."""
    if "--disable-userns" not in _bwrap_options():
        return False, (f"user namespaces NOT disabled in the box: this bubblewrap "
                       f"({_bwrap_version()}) has no --disable-userns (it came in 0.8)")
    if os.geteuid() != 0:
        return True, "user namespaces disabled in the box (bwrap --disable-userns)"
    probe = command(["/bin/sh", "-c", "test $(id -u) = 65534"], None, {}, BoxLimits(),
                    userns_guard=True)
    try:
        done = subprocess.run(probe, capture_output=True, timeout=30,
                              preexec_fn=rlimits(BoxLimits()))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"user namespaces NOT disabled in the box: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        return False, ("user namespaces NOT disabled in the box: the box's own user "
                       f"namespace could not be made ({why[:200]})")
    return True, ("user namespaces disabled in the box (a second bwrap as uid 65534: "
                  "--unshare-user --disable-userns)")


def hardening() -> list[str]:
    """Lines saying which of the box's defences beyond its namespaces are in force."""
    seccomp = (f"a seccomp filter refuses {len(box_seccomp.X86_64_REFUSED)} system calls "
               "and clone with new namespaces (x86-64)" if box_seccomp.supported() else
               f"no seccomp filter: none is written for {platform.machine()} (x86-64 only)")
    return [_userns_guard()[1], seccomp]


@functools.cache
def unavailable() -> str | None:
    """Why a box cannot be made on this machine, or None when it can (tried once)."""
    if not sys.platform.startswith("linux"):
        return f"the OS sandbox needs Linux (bubblewrap); this is {sys.platform}"
    if _bwrap() is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    if os.geteuid() == 0 and _setpriv() is None:
        return "setpriv (util-linux) is not installed"
    try:
        done = subprocess.run(command(["/bin/sh", "-c", "test $(id -u) = 65534"], None, {},
                                      BoxLimits(), userns_guard=False),
                              capture_output=True, timeout=30, preexec_fn=rlimits(BoxLimits()))
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not start: {exc}"
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        return f"bubblewrap could not make a box here: {why}"
    return None


def python_prefixes() -> list[str]:
    """The folders Python runs from: the interpreter's prefix and the virtual environment."""
    found: list[str] = []
    for path in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        real = os.path.realpath(path)
        for p in (path, real):
            if not any(p == f or p.startswith(f.rstrip("/") + "/") for f in [*found, *_SYSTEM]):
                found.append(p)
    return found


@functools.cache
def _support_dir() -> Path:
    """Two small files the box sees as /etc/hosts and /etc/passwd, and the seccomp filter
    (a private folder of this process, removed at exit)."""
    import atexit
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="dpsim-box-etc-"))
    for name, text in (("hosts", _HOSTS), ("passwd", _PASSWD)):
        (folder / name).write_text(text)
        (folder / name).chmod(0o644)
    if box_seccomp.supported():
        (folder / SECCOMP_FILE).write_bytes(box_seccomp.program())
    atexit.register(shutil.rmtree, folder, True)
    return folder


def command(argv: list[str], lib: Path | None, env: Mapping[str, str],
            limits: BoxLimits, userns_guard: bool | None = None) -> list[str]:
    """`argv` wrapped in a new box; `lib` (a dpsim copy's parent folder) appears at BOX_LIB;
    `env` is the whole environment inside. `userns_guard`: whether user namespaces are
    disabled inside (None: where this bubblewrap can, see `hardening`)."""
    if userns_guard is None:
        userns_guard = _userns_guard()[0]
    bwrap = _bwrap() or "bwrap"
    args = [bwrap, "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try", "--hostname", "dpsim-box", "--die-with-parent",
            "--new-session", "--clearenv"]
    root = os.geteuid() == 0
    if root:
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        args += ["--unshare-user", "--uid", str(BOX_UID), "--gid", str(BOX_UID)]
        if userns_guard:
            args += ["--disable-userns"]
    # the empty file systems first: a bind below (a virtual environment under /tmp, say)
    # lands on top of them instead of being hidden by them
    size = str(limits.tmpfs_bytes)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm",
             "--perms", "0777", "--size", size, "--tmpfs", BOX_HOME]
    for path in _SYSTEM:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    binds = [(path, path) for path in python_prefixes()]
    if lib is not None:
        binds.append((str(lib), BOX_LIB))
    etc = _support_dir()
    binds += [(str(etc / "hosts"), "/etc/hosts"), (str(etc / "passwd"), "/etc/passwd")]
    made = {"/", "/proc", "/dev", "/tmp", "/dev/shm", BOX_HOME, *_SYSTEM}
    for source, target in binds:
        for parent in reversed(Path(target).parents[:-1]):  # readable by uid 65534
            if str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", source, target]
    args += ["--chdir", BOX_HOME]
    inside = {"HOME": BOX_HOME, "USER": "learner", "LOGNAME": "learner", "TMPDIR": "/tmp",
              "PATH": f"{os.path.dirname(sys.executable)}:/usr/bin:/bin", **env}
    for key, value in inside.items():
        args += ["--setenv", key, value]
    # the filter goes on the last bwrap: it refuses the namespaces a bwrap before it makes
    seccomp = ["--seccomp", str(_SECCOMP_FD)] if box_seccomp.supported() else []
    if root:
        if not userns_guard:
            args += seccomp
        args += [_setpriv() or "setpriv", f"--reuid={BOX_UID}", f"--regid={BOX_UID}",
                 "--clear-groups", "--no-new-privs", "--"]
        if userns_guard:
            args += _inner_userns_guard(seccomp)
    else:
        args += seccomp
    if not seccomp:
        return [*args, *argv]
    # a shell opens the filter on its descriptor, then execs the first bwrap in its place
    return ["/bin/sh", "-c", f'exec "$@" {_SECCOMP_FD}<"$0"', str(etc / SECCOMP_FILE),
            *args, *argv]


def group(limits: BoxLimits) -> BoxGroup | None:
    """A new control group for one box with `limits` (None where none can be made here);
    pass it to `rlimits` and close it when the box has ended."""
    return BoxGroup.make(limits.memory_bytes, limits.processes)


def rlimits(limits: BoxLimits, group: BoxGroup | None = None) -> Callable[[], None]:
    """A `preexec_fn` that puts the process that becomes the box in its `group` and sets
    its rlimits. With a group, the group counts the box's processes (RLIMIT_NPROC, which
    as root counts every process of uid 65534 on the machine, is left as it was)."""

    def apply() -> None:
        if group is not None:
            group.join()
        nproc = limits.processes
        if group is not None:  # the group counts them; the rlimit stays as it was
            nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
        elif os.geteuid() != 0:  # counted with every process of this user outside the box
            nproc += len([p for p in os.listdir("/proc") if p.isdigit()])
        for which, value in ((resource.RLIMIT_AS, limits.memory_bytes),
                             (resource.RLIMIT_NPROC, nproc),
                             (resource.RLIMIT_CPU, limits.cpu_s),
                             (resource.RLIMIT_FSIZE, limits.disk_bytes),
                             (resource.RLIMIT_CORE, 0)):
            resource.setrlimit(which, (value, value))

    return apply
