"""The doctor's per-GPU lines, from plain GPU descriptions (no GPU needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dpsim.course.doctor import format_report
from dpsim.course.gpu_report import describe, from_torch, parse_topology, preset_for
from dpsim.sim.limits import GiB

# The layout of `nvidia-smi topo -m`: indented GPU column names, a row per GPU ("X" on the
# diagonal), then NICs, affinities and a legend.
TOPO_NVLINK = """\
\tGPU0\tGPU1\tGPU2\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID
GPU0\t X \tNV18\tSYS\tPXB\t0-47\t0\t\tN/A
GPU1\tNV18\t X \tSYS\tSYS\t0-47\t0\t\tN/A
GPU2\tSYS\tSYS\t X \tSYS\t48-95\t1\t\tN/A
NIC0\tPXB\tSYS\tSYS\t X

Legend:

  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""
TOPO_PCIE = "\x1b[4m\tGPU0\tGPU1\tCPU Affinity\x1b[0m\nGPU0\t X \tPHB\t0-63\nGPU1\tPHB\t X \t0-63\n"


def gpu(index: int, name: str, gib: float, cap: tuple[int, int] = (9, 0),
        peers: tuple[int, ...] = ()) -> dict[str, object]:
    return {"index": index, "name": name, "memory_bytes": int(gib * GiB), "capability": cap,
            "peers": list(peers)}


def test_topology_is_read_per_gpu_pair() -> None:
    links = parse_topology(TOPO_NVLINK)
    assert links == {(0, 1): "NV18", (0, 2): "SYS", (1, 0): "NV18", (1, 2): "SYS",
                     (2, 0): "SYS", (2, 1): "SYS"}
    assert parse_topology(TOPO_PCIE) == {(0, 1): "PHB", (1, 0): "PHB"}
    assert parse_topology("No devices were found") == {}


@pytest.mark.parametrize(("name", "gib", "preset"), [
    ("NVIDIA H100 80GB HBM3", 79.1, "h100-80gb"),
    ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
    ("NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"),
    ("NVIDIA GeForce RTX 4090", 23.6, "rtx-4090"),
    ("NVIDIA A100-PCIE-40GB", 39.4, "a100-40gb"),  # "a100" names the model; memory the size
    ("Tesla T4", 14.6, "t4"),
    ("NVIDIA L4", 22.0, "l4"),
    ("NVIDIA A10G", 22.0, "a10g"),
    ("NVIDIA A10", 22.0, "a10"),
    ("NVIDIA GeForce RTX 3070", 7.8, "rtx-3070"),
    ("NVIDIA GeForce RTX 3080", 9.8, "rtx-3080"),
    ("NVIDIA GeForce RTX 3090", 23.7, "rtx-3090"),
    ("NVIDIA GeForce RTX 4080", 15.7, "rtx-4080"),
    ("NVIDIA L40S", 44.4, None),  # neither an L4 nor an L40
    ("NVIDIA Quadro P1000", 3.9, None),
])
def test_preset_by_family_and_memory(name: str, gib: float, preset: str | None) -> None:
    assert preset_for(name, int(gib * GiB)) == preset


def test_each_gpu_gets_name_memory_capability_peers_and_preset() -> None:
    gpus = [gpu(0, "NVIDIA H100 80GB HBM3", 79.1, peers=(1, 2)),
            gpu(1, "NVIDIA H100 80GB HBM3", 79.1, peers=(0, 2)),
            gpu(2, "NVIDIA H100 80GB HBM3", 79.1)]
    lines = describe(gpus, parse_topology(TOPO_NVLINK))
    assert lines[0].split() == ["GPU", "0", "NVIDIA", "H100", "80GB", "HBM3,", "79.1", "GiB,",
                                "compute", "capability", "9.0,", "peer", "access", "to",
                                "[1,", "2],", "over", "NVLink", "to", "[1]"]
    assert lines[1].split() == ["dpsim", "preset:", "h100-80gb"]
    assert "peer access: none" in lines[4]
    assert not any("WARNING" in ln for ln in lines)


def test_links_unknown_without_nvidia_smi_and_pcie_said_so() -> None:
    pair = [gpu(0, "NVIDIA A100-SXM4-40GB", 39.4, (8, 0), (1,)),
            gpu(1, "NVIDIA A100-SXM4-40GB", 39.4, (8, 0), (0,))]
    assert "(NVLink or PCIe: nvidia-smi not found)" in describe(pair)[0]
    assert "over PCIe (no NVLink)" in describe(pair, parse_topology(TOPO_PCIE))[0]


def test_unknown_gpu_is_warned_about() -> None:
    lines = describe([gpu(0, "NVIDIA Quadro P1000", 3.9, (6, 1))])
    assert "compute capability 6.1" in lines[0]
    assert lines[1].strip().startswith("WARNING: unknown GPU")
    assert "'NVIDIA Quadro P1000'" in lines[1]
    assert describe([]) == ["  GPUs          none"]


def test_doctor_report_shows_the_gpu_lines() -> None:
    facts = {"python": "3.11.7", "platform": "Linux", "cpu_cores": 16, "torch": "2.13.0",
             "cuda_available": True, "cuda_version": "13.0", "gil_enabled": True,
             "gpus": [gpu(0, "NVIDIA H100 80GB HBM3", 79.1)], "gpu_links": {},
             "gloo": True, "nccl": True, "plan": []}
    text = format_report(facts)
    assert "GPU 0         NVIDIA H100 80GB HBM3, 79.1 GiB, compute capability 9.0" in text
    assert "dpsim preset: h100-80gb" in text


# The GPUs learners reach: Kaggle's 2 x T4, Colab's T4, cloud L4 and A10G, their own RTX cards.
LEARNER_GPUS = [("Tesla T4", 15.6, (7, 5), "t4"), ("NVIDIA L4", 22.5, (8, 9), "l4"),
                ("NVIDIA A10G", 22.5, (8, 6), "a10g"),
                ("NVIDIA GeForce RTX 3070", 7.8, (8, 6), "rtx-3070"),
                ("NVIDIA GeForce RTX 3080", 9.8, (8, 6), "rtx-3080"),
                ("NVIDIA GeForce RTX 3090", 23.7, (8, 6), "rtx-3090"),
                ("NVIDIA GeForce RTX 4080", 15.7, (8, 9), "rtx-4080"),
                ("NVIDIA GeForce RTX 4090", 23.6, (8, 9), "rtx-4090")]


@pytest.mark.parametrize(("name", "gib", "capability", "preset"), LEARNER_GPUS,
                         ids=[g[3] for g in LEARNER_GPUS])
def test_doctor_names_a_learners_gpu_from_what_torch_reports(
        monkeypatch: pytest.MonkeyPatch, name: str, gib: float, capability: tuple[int, int],
        preset: str) -> None:
    """torch.cuda faked as two such GPUs (Kaggle's 2 x T4 shape): the doctor's own path from
    torch's device properties to the report names the preset, with no warning."""
    import torch

    from dpsim.course import doctor, gpu_report

    props = SimpleNamespace(name=name, total_memory=int(gib * GiB), major=capability[0],
                            minor=capability[1])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda i, j: False)
    monkeypatch.setattr(gpu_report, "topology", dict)  # no nvidia-smi is run
    monkeypatch.setattr(doctor.platform, "platform", lambda: "Linux")  # uname -p: a process
    text = doctor.format_report(doctor.report())
    for i in (0, 1):
        assert f"GPU {i}         {name}, {gib:.1f} GiB, compute capability " \
               f"{capability[0]}.{capability[1]}, peer access: none" in text
    assert text.count(f"dpsim preset: {preset}\n") == 2
    assert "WARNING" not in text


@pytest.mark.gpu
@pytest.mark.skipif(not from_torch(), reason="needs a CUDA GPU")
def test_this_machines_gpus_are_described() -> None:
    gpus = from_torch()
    lines = describe(gpus)
    assert len(lines) == 2 * len(gpus)
    assert all(g["memory_bytes"] > GiB and g["capability"][0] >= 3 for g in gpus)
