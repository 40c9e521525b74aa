"""Whether this machine's GPUs sit on an NVSwitch that reduces in place (NVLink SHARP, NVLS).

NVLS needs a third-generation NVSwitch or later: H100, H200 or B200 SXM parts on an HGX/DGX
baseboard. The driver says which GPUs are joined by how many NVLinks (`nvidia-smi topo -m`:
"NV18" = 18 links between that pair). An H100/H200/B200 SXM has 18 NVLinks (NVIDIA's
datasheets: "18 NVLink connections"); every pair at NV18 means each GPU reaches every other
over all of its links, which only a switch allows (the 4-GPU HGX H100 board without
NVSwitch splits them, NV6 per pair; an H100 NVL pair has a bridge of NV12). So NVLS is
taken as present when the name is an H100/H200/B200 SXM part, there are at least two GPUs,
and every pair reads NV18 or more. Anything else is False, and a missing or unreadable
topology warns with its reason: never a silent guess. What is not checked: the NCCL
version (NVLS since 2.17), NCCL_NVLS_ENABLE, and whether the fabric manager runs.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import warnings

from dpsim.sim import match_name

NVLS_PARTS = ("h100-80gb", "h200", "b200")  # gpu_specs keys of NVSwitch gen 3+ SXM parts
NVLS_MIN_LINKS = 18  # NVLinks per H100/H200/B200 SXM GPU (every one through the switch)
TOPO_TIMEOUT_S = 10.0
_CELL = re.compile(r"^NV(\d+)$")


def read_topology() -> str | None:
    """`nvidia-smi topo -m` as text, or None when nvidia-smi is absent or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                              timeout=TOPO_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 and done.stdout.strip() else None


def gpu_links(topology: str) -> dict[tuple[int, int], str]:
    """The GPU-to-GPU cells of `nvidia-smi topo -m` text: {(row, column): "NV18", ...}."""
    if not isinstance(topology, str):
        raise ValueError(f"topology={topology!r} is not text; allowed: the output of "
                         "`nvidia-smi topo -m`")
    lines = [line.rstrip() for line in topology.splitlines() if line.strip()]
    header = next((line.split() for line in lines if line.split()[:1] == ["GPU0"]), None)
    if header is None:
        return {}
    gpus = [i for i, name in enumerate(header) if re.fullmatch(r"GPU\d+", name)]
    cells: dict[tuple[int, int], str] = {}
    for line in lines:
        parts = line.split()
        row = re.fullmatch(r"GPU(\d+)", parts[0]) if parts else None
        if row is None or len(parts) < len(gpus) + 1:
            continue
        for col in gpus:
            cells[(int(row.group(1)), int(header[col][3:]))] = parts[col + 1]
    return cells


def nvls_support(cuda_name: str, n_gpus: int, topology: str | None) -> tuple[bool, str]:
    """(NVLS present, why) from the GPU's name, the count and `nvidia-smi topo -m` text."""
    if not isinstance(cuda_name, str) or not isinstance(n_gpus, int) or n_gpus < 0:
        raise ValueError(f"cuda_name={cuda_name!r}, n_gpus={n_gpus!r}; allowed: a CUDA "
                         "device name and a count >= 0")
    lowered = cuda_name.lower()
    if match_name(cuda_name) not in NVLS_PARTS or "pcie" in lowered or "nvl" in lowered.split():
        return False, f"{cuda_name} is not an H100/H200/B200 SXM part (NVLS needs one)"
    if n_gpus < 2:
        return False, "one GPU: nothing to reduce across"
    if topology is None:
        return False, "nvidia-smi topo -m could not be read, so NVSwitch is unknown"
    cells = gpu_links(topology)
    pairs = [(a, b) for a in range(n_gpus) for b in range(n_gpus) if a != b]
    missing = [p for p in pairs if p not in cells]
    if missing:
        return False, f"nvidia-smi topo -m lists no link for GPU pair {missing[0]}"
    counts = [_CELL.match(cells[p]) for p in pairs]
    if not all(counts):
        bad = next(p for p, m in zip(pairs, counts, strict=True) if not m)
        return False, f"GPUs {bad[0]} and {bad[1]} are joined by {cells[bad]}, not NVLink"
    fewest = min(int(m.group(1)) for m in counts if m)
    if fewest < NVLS_MIN_LINKS:
        return False, (f"the thinnest GPU pair has NV{fewest}, below NV{NVLS_MIN_LINKS}: "
                       "NVLink without an NVSwitch between every pair")
    return True, f"NVSwitch: every GPU pair NV{fewest} ({cuda_name})"


def detect_nvls(cuda_name: str, n_gpus: int, topology: str | None) -> tuple[bool, str]:
    """`nvls_support`, warning whenever a part that could have NVLS is judged without it."""
    present, why = nvls_support(cuda_name, n_gpus, topology)
    could = match_name(cuda_name) in NVLS_PARTS and n_gpus > 1
    if could and not present:
        warnings.warn(f"NVLS (NVLink SHARP) taken as absent: {why}", stacklevel=2)
    return present, why
