"""The doctor's report per GPU: name, memory, compute capability, peers, dpsim preset.

`describe` turns plain descriptions of the GPUs (dicts; `from_torch` makes them on a
machine with CUDA) into report lines, so the report is tested without a GPU. Peer access
is what `torch.cuda.can_device_access_peer` says (direct copies over NVLink or PCIe);
which of the two carries it comes from `nvidia-smi topo -m` where that command exists.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

from dpsim.sim import DEVICES, GiB, match_name

ANSI = re.compile(r"\x1b\[[0-9;]*m")  # terminal escape codes, removed before parsing
MEMORY_SUFFIX = re.compile(r"-\d+gb$")  # a preset key's memory size: a100-40gb -> a100
NVLINK = re.compile(r"^NV\d+$")  # "NV12": 12 NVLinks between the two GPUs (nvidia-smi topo)


def preset_for(name: str, memory_bytes: int) -> str | None:
    """The dpsim GPU preset that the CUDA name identifies (`match_name`: "Tesla T4" is t4,
    "NVIDIA A10G" a10g, "NVIDIA GeForce RTX 3090" rtx-3090, "NVIDIA L40S" none); among
    presets of one model in several memory sizes (a100-40gb, a100-80gb) the one nearest in
    memory. None if no preset matches."""
    key = match_name(name)
    if key is None:
        return None
    model = MEMORY_SUFFIX.sub("", key)
    sizes = [k for k in DEVICES if MEMORY_SUFFIX.sub("", k) == model]
    return min(sizes, key=lambda k: (abs(DEVICES[k].memory_GiB - memory_bytes / GiB), k != key))


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m` as {(i, j): "NV12" / "PIX" / "SYS" / ...} between GPU i and j."""
    links: dict[tuple[int, int], str] = {}
    header: list[str] = []
    for line in ANSI.sub("", text).splitlines():
        cells = line.split()
        if not cells:
            continue
        if not header and line[:1].isspace() and cells[0] == "GPU0":  # the column names
            header = cells
            continue
        if header and re.fullmatch(r"GPU\d+", cells[0]):
            i = int(cells[0][3:])
            for col, value in zip(header, cells[1:], strict=False):
                if re.fullmatch(r"GPU\d+", col) and value != "X":
                    links[(i, int(col[3:]))] = value
    return links


def _gpu_line(gpu: Mapping[str, Any], links: Mapping[tuple[int, int], str]) -> list[str]:
    i, name, nbytes = int(gpu["index"]), str(gpu["name"]), int(gpu["memory_bytes"])
    major, minor = gpu["capability"]
    peers = sorted(int(p) for p in gpu.get("peers", ()))
    nvlink = [p for p in peers if NVLINK.match(links.get((i, p), ""))]
    preset = preset_for(name, nbytes)
    if not peers:
        peer_text = "peer access: none"
    elif links:
        peer_text = (f"peer access to {peers}, over NVLink to {nvlink}" if nvlink
                     else f"peer access to {peers} over PCIe (no NVLink)")
    else:
        peer_text = f"peer access to {peers} (NVLink or PCIe: nvidia-smi not found)"
    lines = [f"  GPU {i}         {name}, {nbytes / GiB:.1f} GiB, compute capability "
             f"{major}.{minor}, {peer_text}",
             f"  {'':<14}dpsim preset: {preset}" if preset else
             f"  {'':<14}WARNING: unknown GPU, no dpsim preset matches {name!r} "
             f"(presets: {', '.join(k for k, d in DEVICES.items() if d.kind == 'gpu')}); "
             "its simulated times borrow another GPU's peak rates"]
    return lines


def describe(gpus: Sequence[Mapping[str, Any]],
             links: Mapping[tuple[int, int], str] | None = None) -> list[str]:
    """Report lines for GPUs given as dicts: index, name, memory_bytes, capability (major,
    minor), peers (indices it can access directly); `links` from `parse_topology`."""
    if not gpus:
        return ["  GPUs          none"]
    out: list[str] = []
    for gpu in gpus:
        out += _gpu_line(gpu, links or {})
    return out


def from_torch() -> list[dict[str, Any]]:
    """This machine's CUDA GPUs as the plain descriptions `describe` takes ([] without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return []
    n = torch.cuda.device_count()
    gpus = []
    for i in range(n):
        props = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": props.name, "memory_bytes": int(props.total_memory),
                     "capability": (props.major, props.minor),
                     "peers": [j for j in range(n)
                               if j != i and torch.cuda.can_device_access_peer(i, j)]})
    return gpus


def topology() -> dict[tuple[int, int], str]:
    """`nvidia-smi topo -m` parsed, or {} where nvidia-smi is missing or fails."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return {}
    try:
        out = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    return parse_topology(out)
