"""`python -m dpsim doctor`: what this machine has and what will run for real here."""

from __future__ import annotations

import os
import platform
from typing import Any

from dpsim.course.chapters import plan
from dpsim.runtime.gil_measure import gil_status


def report() -> dict[str, Any]:
    """Facts about this machine as a dict (GPU memory in GiB)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    gpus = []
    if cuda:
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append({"index": i, "name": props.name,
                         "memory_GiB": round(props.total_memory / 1024**3, 1)})
    nccl = bool(cuda and dist.is_available() and dist.is_nccl_available())
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": os.cpu_count() or 1,
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "gpus": gpus,
        "distributed": dist.is_available(),
        "gloo": bool(dist.is_available() and dist.is_gloo_available()),
        "nccl": nccl,
        "gil_enabled": gil_status()["gil_enabled"],
        "plan": plan(len(gpus), nccl),
    }


def format_report(facts: dict[str, Any]) -> str:
    """The report as plain text."""
    yes = {True: "yes", False: "no"}
    lines = [
        "dpsim doctor",
        f"  python        {facts['python']} ({facts['platform']})",
        f"  CPU cores     {facts['cpu_cores']}",
        f"  torch         {facts['torch']}",
        f"  CUDA          {yes[facts['cuda_available']]}"
        + (f" (CUDA {facts['cuda_version']})" if facts["cuda_available"] else ""),
    ]
    for g in facts["gpus"]:
        lines.append(f"  GPU {g['index']}         {g['name']}, {g['memory_GiB']} GiB")
    if not facts["gpus"]:
        lines.append("  GPUs          none")
    lines += [
        f"  gloo          {yes[facts['gloo']]}",
        f"  NCCL          {yes[facts['nccl']]}",
        f"  GIL           {'enabled' if facts['gil_enabled'] else 'disabled (free-threaded)'}",
        "",
        "What runs for real here, notebook by notebook:",
    ]
    for row in facts["plan"]:
        lines.append(f"  {row['notebook']:<30} real: {row['real here']}")
        lines.append(f"  {'':<30} simulated: {row['simulated']}")
    return "\n".join(lines)


def main() -> int:
    """Print the report; exit 0."""
    print(format_report(report()))
    return 0
