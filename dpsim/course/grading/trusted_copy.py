"""The grader's own code, kept where a notebook cannot change what the grader runs.

At grader start every `.py` file of the dpsim package is read into memory (the manifest).
The checking processes import dpsim from a copy written from that manifest into a fresh
temporary folder, made read-only, and started with `python -I -B` (no PYTHONPATH, no user
site, no bytecode written). A notebook runs as the same user, so it could make the copy
writable again or plant a `.pyc` in it: `verify()` runs before every use and rewrites
each file whose bytes differ from the manifest and deletes every file that is not in it
(`__pycache__` and sourceless `.pyc` included), so what runs is always the manifest.
Each notebook's kernel imports dpsim from its own throwaway copy (`write_copy`), so
an edit there changes nothing for the next notebook. The grader process itself imports
every chapter module before the first notebook runs, and later imports of dpsim
submodules resolve to the verified copy (`redirect_package`).

Not covered: torch and the other packages of the Python environment; keep them read-only
to the learner (a container image, see README "For instructors").
"""

from __future__ import annotations

import contextlib
import shutil
import stat
import sys
import tempfile
from pathlib import Path

_KEEP = (".py", ".typed")


def read_manifest(package_dir: Path) -> dict[str, bytes]:
    """Relative path -> bytes of every source file of the package (no bytecode)."""
    files = {}
    for path in sorted(package_dir.rglob("*")):
        if path.is_file() and path.suffix in _KEEP and "__pycache__" not in path.parts:
            files[path.relative_to(package_dir.parent).as_posix()] = path.read_bytes()
    return files


def write_copy(manifest: dict[str, bytes], root: Path) -> None:
    """Write the manifest under `root` (root/dpsim/...) and make it read-only."""
    for rel, data in manifest.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    _set_writable(root, False)


def _set_writable(root: Path, writable: bool) -> None:
    for path in [*root.rglob("*"), root]:
        with contextlib.suppress(OSError):
            mode = path.stat().st_mode
            bits = stat.S_IWUSR if writable else 0
            path.chmod((mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)) | bits)


class TrustedCopy:
    """A verified, read-only copy of the dpsim package; `root` goes first on sys.path."""

    def __init__(self, package_dir: Path | None = None) -> None:
        self.package_dir = package_dir or Path(__file__).resolve().parents[2]
        self.manifest = read_manifest(self.package_dir)
        self.root = Path(tempfile.mkdtemp(prefix="dpsim-grader-lib-"))
        self.root.chmod(0o755)  # readable by the OS box's unprivileged user (grading.box)
        write_copy(self.manifest, self.root)
        self._saved: list[tuple[list[str], list[str]]] = []  # package __path__, old value
        self._bytecode = sys.dont_write_bytecode

    def verify(self) -> list[str]:
        """Restore the copy to the manifest; the changes found (empty when untouched)."""
        changes: list[str] = []
        _set_writable(self.root, True)
        try:
            for path in sorted(self.root.rglob("*"), reverse=True):
                rel = path.relative_to(self.root).as_posix()
                if path.is_symlink() or (path.is_file() and rel not in self.manifest):
                    changes.append(f"removed {rel}")
                    path.unlink()
                elif path.is_dir() and not any(m.startswith(rel + "/") for m in self.manifest):
                    changes.append(f"removed {rel}/")
                    shutil.rmtree(path, ignore_errors=True)
            for rel, data in self.manifest.items():
                target = self.root / rel
                if not target.is_file() or target.read_bytes() != data:
                    changes.append(f"restored {rel}")
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
        finally:
            _set_writable(self.root, False)
        return changes

    def source_changes(self) -> list[str]:
        """Files of the original package that differ from what was read at start."""
        now = read_manifest(self.package_dir)
        return sorted(rel for rel in now.keys() | self.manifest.keys()
                      if now.get(rel) != self.manifest.get(rel))

    def redirect_package(self) -> None:
        """Point the imported dpsim packages' __path__ at the copy (later imports load it)."""
        sys.dont_write_bytecode = True
        for name, module in list(sys.modules.items()):
            paths = getattr(module, "__path__", None)
            if (name == "dpsim" or name.startswith("dpsim.")) and isinstance(paths, list):
                self._saved.append((paths, list(paths)))
                paths[:] = [str(self.root.joinpath(*name.split(".")))]

    def close(self) -> None:
        """Point the packages back where they were and remove the copy."""
        for paths, old in self._saved:
            paths[:] = old
        self._saved.clear()
        sys.dont_write_bytecode = self._bytecode
        _set_writable(self.root, True)
        shutil.rmtree(self.root, ignore_errors=True)


def fresh_copy(manifest: dict[str, bytes], parent: Path) -> Path:
    """A throwaway read-only copy for one notebook's kernel; returns the folder to import from."""
    root = parent / "lib"
    root.mkdir(mode=0o700)
    write_copy(manifest, root)
    return root


def remove_tree(path: Path) -> None:
    """Remove a throwaway folder, read-only parts included."""
    _set_writable(path, True)
    shutil.rmtree(path, ignore_errors=True)
