"""The GPU check's wheels: what scripts/gpu_bundle.txt lists, for the GPU machine's Python.

    python scripts/gpu_bundle.py download [--dest build/gpu-bundle]   (make gpu-bundle)
    python scripts/gpu_bundle.py check [--dest build/gpu-bundle]

`download` asks pip for each listed package as a wheel for CPython 3.12 on manylinux x86-64
(`pip download --only-binary=:all: --no-deps`, one version each), removes wheels the list no
longer names, then runs `check`: every listed package has exactly one wheel of its pinned
version, and every requirement in a wheel's METADATA (for Python 3.12 on Linux x86-64) is
either bundled or on the GPU machine's image (scripts/gpu_image_packages.txt). It prints the
bundle's size in MiB: the bundle and the working tree travel together, 64 MiB at most.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUNDLE_LIST = ROOT / "scripts" / "gpu_bundle.txt"
IMAGE_LIST = ROOT / "scripts" / "gpu_image_packages.txt"
DEST = ROOT / "build" / "gpu-bundle"
PYTHON_VERSION = "3.12"
PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux_2_27_x86_64",
             "manylinux_2_28_x86_64", "manylinux1_x86_64")
# the GPU machine, as packaging's environment markers see it
MARKERS = {"python_version": PYTHON_VERSION, "python_full_version": "3.12.3",
           "sys_platform": "linux", "platform_system": "Linux", "platform_machine": "x86_64",
           "os_name": "posix", "implementation_name": "cpython",
           "platform_python_implementation": "CPython", "extra": ""}
MAX_MIB = 40.0  # the bundle's share of the 64 MiB that travel (the working tree: about 5)


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them ("Jupyter_Core" -> "jupyter-core")."""
    return re.sub(r"[-_.]+", "-", name).lower()


def bundle_list(path: Path = BUNDLE_LIST) -> dict[str, str]:
    """{normalized name: pinned version} from a `name==version` file (# comments)."""
    pins: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9.+!-]+)", line)
        if match is None:
            raise ValueError(f"{path.name}: line {raw!r} is not name==version")
        pins[normalize(match[1])] = match[2]
    return pins


def image_packages(path: Path = IMAGE_LIST) -> set[str]:
    """The normalized names of the packages on the GPU machine's image."""
    text = "\n".join(line.split("#", 1)[0] for line in path.read_text().splitlines())
    return {normalize(name) for name in text.split()}


def wheel_name_version(wheel: Path) -> tuple[str, str]:
    """(normalized distribution name, version) from a wheel's file name."""
    name, version = wheel.name.split("-")[:2]
    return normalize(name), version


def wheel_requirements(wheel: Path) -> list[str]:
    """The normalized names a wheel requires on the GPU machine (no extras)."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        headers = Parser().parsestr(zf.read(meta).decode())
    names = []
    for text in headers.get_all("Requires-Dist") or []:
        req = Requirement(text)
        if req.marker is None or req.marker.evaluate(MARKERS):
            names.append(normalize(req.name))
    return names


def problems(dest: Path, pins: dict[str, str], image: set[str]) -> list[str]:
    """What is wrong with the wheels in `dest` against the list (empty: nothing)."""
    found: dict[str, list[str]] = {}
    wheels = sorted(dest.glob("*.whl"))
    for wheel in wheels:
        name, version = wheel_name_version(wheel)
        found.setdefault(name, []).append(version)
    out = [f"{name}: no wheel (pinned {version})" for name, version in pins.items()
           if name not in found]
    out += [f"{name}: wheels {versions}, pinned {pins.get(name)}"
            for name, versions in found.items() if versions != [pins.get(name)]]
    out += [f"{name}: on the GPU image already; remove it from {BUNDLE_LIST.name}"
            for name in pins if name in image]
    for wheel in wheels:
        out += [f"{wheel.name} requires {req}: in neither {BUNDLE_LIST.name} nor "
                f"{IMAGE_LIST.name}" for req in wheel_requirements(wheel)
                if req not in pins and req not in image]
    return out


def size_mib(dest: Path) -> float:
    """The wheels' total size in MiB."""
    return sum(w.stat().st_size for w in dest.glob("*.whl")) / 2**20


def download(dest: Path, pins: dict[str, str]) -> None:
    """Download every pinned wheel not yet in `dest`; remove wheels the list does not pin."""
    dest.mkdir(parents=True, exist_ok=True)
    have = {wheel_name_version(w): w for w in dest.glob("*.whl")}
    for key, wheel in have.items():
        if pins.get(key[0]) != key[1]:
            print(f"gpu_bundle: removing {wheel.name} (not in {BUNDLE_LIST.name})")
            wheel.unlink()
    wanted = [f"{name}=={version}" for name, version in pins.items()
              if (name, version) not in have]
    if not wanted:
        return
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check",
                    "--quiet", "--no-deps", "--only-binary=:all:", "--python-version",
                    PYTHON_VERSION, "--implementation", "cp", *platforms, "--dest", str(dest),
                    *wanted], check=True)


def check(dest: Path) -> int:
    """Print the bundle's problems and size; 0 when there are none and it is small enough."""
    found = problems(dest, bundle_list(), image_packages())
    mib = size_mib(dest)
    for line in found:
        print(f"gpu_bundle: {line}", file=sys.stderr)
    if mib > MAX_MIB:
        found.append(f"{mib:.1f} MiB > {MAX_MIB} MiB")
        print(f"gpu_bundle: {mib:.1f} MiB is over {MAX_MIB} MiB", file=sys.stderr)
    print(f"gpu_bundle: {len(list(dest.glob('*.whl')))} wheels, {mib:.1f} MiB in {dest}"
          + ("" if found else ", complete"))
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    """`download` (then check) or `check` the bundle."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("download", "check"))
    parser.add_argument("--dest", type=Path, default=DEST)
    args = parser.parse_args(argv)
    if args.action == "download":
        download(args.dest, bundle_list())
    return check(args.dest)


if __name__ == "__main__":
    sys.exit(main())
