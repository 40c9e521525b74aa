"""Where a page's numbers come from: the machine that ran the notebooks, and recorded GPU runs.

Every chapter page of the site opens with this line, so a reader knows which numbers were
measured where: the measured ones on the machine that executed the notebooks for the build,
the simulated ones from dpsim, and GPU numbers only from a recorded results file.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path


@dataclass(frozen=True)
class GpuRecord:
    """One recorded GPU run: benchmarks/results/gpu_<device>.json."""

    device: str  # the GPU's name as torch reported it
    file: str  # the results file's name


@dataclass(frozen=True)
class Provenance:
    """The build's machine and date, and the GPU records that exist."""

    cpu: str  # CPU model name
    cores: int  # logical CPU cores
    system: str  # e.g. "Linux 6.8 x86_64"
    torch: str  # torch version the notebooks ran
    date: str  # ISO date (UTC) the notebooks ran
    gpu_records: tuple[GpuRecord, ...]

    def banner(self, source_link: str) -> str:
        """The chapter page's opening note, as Markdown (`source_link`: the notebook's URL)."""
        gpu = ("; ".join(f"recorded on {r.device} ({r.file})" for r in self.gpu_records)
               if self.gpu_records else "none recorded yet: GPU paths are described, not shown")
        return (
            ":::{note}\n"
            f"**Where the numbers on this page come from.** *Measured* and *re-enacted*: "
            f"this notebook ran on {self.cpu} ({self.cores} CPU cores, {self.system}, "
            f"torch {self.torch}) on {self.date}, when the site was built; no GPU. "
            f"*Simulated*: dpsim's model. *Published*: the cited source. "
            f"GPU results: {gpu}. "
            f"Source: {{download}}`{Path(source_link).name} <{source_link}>`; "
            "run it yourself with `make lab`.\n"
            ":::\n")


def gpu_records(results_dir: Path) -> tuple[GpuRecord, ...]:
    """The recorded GPU runs in `results_dir` (gpu_*.json), by file name."""
    records = []
    for path in sorted(results_dir.glob("gpu_*.json")):
        data = json.loads(path.read_text())
        device = (data.get("machine") or {}).get("gpu") or path.stem.removeprefix("gpu_")
        records.append(GpuRecord(str(device), path.name))
    return tuple(records)


def this_machine(results_dir: Path, when: dt.date | None = None) -> Provenance:
    """The provenance of notebooks executed here, now."""
    return Provenance(cpu=_cpu_model(), cores=os.cpu_count() or 1,
                      system=f"{platform.system()} {platform.release().split('-')[0]} "
                             f"{platform.machine()}",
                      torch=metadata.version("torch"),
                      date=(when or dt.datetime.now(dt.UTC).date()).isoformat(),
                      gpu_records=gpu_records(results_dir))


def _cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else platform.processor())."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "an unnamed CPU"
