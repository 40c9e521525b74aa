"""`python -m dpsim doctor`: what this machine has and what will run for real here."""

from __future__ import annotations

import os
import platform
from typing import Any

from dpsim.course import gpu_report
from dpsim.course.chapters import plan
from dpsim.runtime.gil_measure import gil_status


def report() -> dict[str, Any]:
    """Facts about this machine as a dict (GPU memory in bytes)."""
    import torch
    import torch.distributed as dist

    cuda = torch.cuda.is_available()
    gpus = gpu_report.from_torch()
    nccl = bool(cuda and dist.is_available() and dist.is_nccl_available())
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": os.cpu_count() or 1,
        "torch": torch.__version__,
        "cuda_available": cuda,
        "cuda_version": torch.version.cuda,
        "gpus": gpus,  # plain descriptions, see gpu_report.describe
        "gpu_links": gpu_report.topology() if len(gpus) > 1 else {},
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
    lines += gpu_report.describe(facts["gpus"], facts.get("gpu_links"))
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
