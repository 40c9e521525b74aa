"""Published peak figures of accelerators, each with its source (plain data, no classes).

Dense peaks (no structured sparsity), per GPU. `bf16_tflops` is the 16-bit tensor-core peak
(fp16 where the chip has no bf16: V100, T4). `link_GBps` is the device-to-device bandwidth
per direction the vendor states (NVLink / Infinity Fabric per GPU, else the PCIe slot).
`hardware.device` turns each row into a `Device`; `names` are lower-case words of the name CUDA
reports (`torch.cuda.get_device_properties(i).name`); the longest whole-word match wins, so
"L40S" is not taken for an L4 nor "A100" for an A10.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class GpuSpec(NamedTuple):
    """One accelerator's datasheet numbers."""

    label: str
    memory_GiB: float  # as sold (GB on the datasheet; dpsim counts it as usable GiB)
    fp32_tflops: float
    bf16_tflops: float
    mem_bw_GBps: float
    link_GBps: float  # device-to-device, per direction
    link_kind: str  # "nvlink", "pcie" or "infinity_fabric"
    names: tuple[str, ...]  # substrings of the CUDA device name that identify it
    source: str
    note: str = ""


A100_DATASHEET = ("NVIDIA A100 Tensor Core GPU datasheet, table 'Specifications' "
                  "(nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
                  "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf)")
A10_DATASHEET = "NVIDIA A10 datasheet (nvidia.com/en-us/data-center/products/a10-gpu)"
# GeForce cards: NVIDIA's architecture whitepapers carry their datasheet tables. GeForce
# tensor cores run FP16 and BF16 with FP32 accumulate (what autocast uses) at half the rate
# of FP16 accumulate: bf16_tflops holds the FP32-accumulate figure.
GA102_WHITEPAPER = ("NVIDIA Ampere GA102 GPU architecture whitepaper V2.0 "
                    "(nvidia.com/content/PDF/nvidia-ampere-ga-102-gpu-architecture-whitepaper-"
                    "v2.pdf)")
ADA_WHITEPAPER = "NVIDIA Ada Lovelace GPU architecture whitepaper v2.1"
H100_DATASHEET = ("NVIDIA H100 Tensor Core GPU datasheet, table 'Technical Specifications' "
                  "(resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet)")

SPECS: dict[str, GpuSpec] = {
    "v100-32gb": GpuSpec(
        "V100 32GB SXM2", 32.0, 15.7, 125.0, 900.0, 150.0, "nvlink", ("v100",),
        "NVIDIA Tesla V100 datasheet (volta-v100-datasheet-update-us-1165301-r5.pdf): "
        "FP32 15.7, tensor 125 TFLOPS, 900 GB/s, NVLink 300 GB/s total",
        "no bf16: bf16_tflops holds the fp16 tensor peak"),
    "a100-40gb": GpuSpec(
        "A100 40GB SXM", 40.0, 19.5, 312.0, 1555.0, 300.0, "nvlink", ("a100-sxm4-40gb",),
        A100_DATASHEET + ": FP32 19.5, BF16 312 TFLOPS, 1,555 GB/s, NVLink 600 GB/s"),
    "a100-80gb": GpuSpec(
        "A100 80GB SXM", 80.0, 19.5, 312.0, 2039.0, 300.0, "nvlink",
        ("a100-sxm4-80gb", "a100 80gb", "a100"),
        A100_DATASHEET + ": FP32 19.5, BF16 312 TFLOPS, 2,039 GB/s, NVLink 600 GB/s"),
    "h100-80gb": GpuSpec(
        "H100 80GB SXM", 80.0, 67.0, 989.0, 3350.0, 450.0, "nvlink",
        ("h100 80gb hbm3", "h100-sxm", "h100"),
        H100_DATASHEET + ", H100 SXM column: FP32 67, BF16 1,979 with sparsity (989 dense), "
        "3.35 TB/s, NVLink 900 GB/s"),
    "h100-pcie": GpuSpec(
        "H100 80GB PCIe", 80.0, 51.0, 756.0, 2000.0, 64.0, "pcie", ("h100 pcie",),
        H100_DATASHEET + ", H100 PCIe column: FP32 51, BF16 1,513 with sparsity (756 dense), "
        "2 TB/s, PCIe Gen5 128 GB/s (64 per direction)"),
    "h200": GpuSpec(
        "H200 141GB SXM", 141.0, 67.0, 989.0, 4800.0, 450.0, "nvlink", ("h200",),
        "NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200), H200 SXM column: FP32 67, "
        "BF16 1,979 with sparsity (989 dense), 141 GB, 4.8 TB/s, NVLink 900 GB/s"),
    "b200": GpuSpec(
        "B200 180GB SXM", 180.0, 75.0, 2250.0, 8000.0, 900.0, "nvlink", ("b200",),
        "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx), 8-GPU column "
        "divided by 8: FP32 600 TFLOPS, BF16 36 PFLOPS with sparsity (18 dense), 1,440 GB "
        "and 64 TB/s HBM3e, NVLink 5 1.8 TB/s per GPU"),
    "l4": GpuSpec(
        "L4 24GB", 24.0, 30.3, 121.0, 300.0, 32.0, "pcie", ("l4",),
        "NVIDIA L4 datasheet (nvidia.com/en-us/data-center/l4): FP32 30.3, BF16 242 with "
        "sparsity (121 dense), 24 GB, 300 GB/s, PCIe Gen4 x16 64 GB/s (32 per direction)"),
    "t4": GpuSpec(
        "T4 16GB", 16.0, 8.1, 65.0, 320.0, 16.0, "pcie", ("t4",),
        "NVIDIA T4 datasheet (nvidia.com/en-us/data-center/tesla-t4): FP32 8.1, mixed "
        "FP16/FP32 65 TFLOPS, 16 GB, 320 GB/s, PCIe Gen3 x16 32 GB/s (16 per direction)",
        "no bf16: bf16_tflops holds the fp16 tensor peak"),
    "a10": GpuSpec(
        "A10 24GB", 24.0, 31.2, 125.0, 600.0, 32.0, "pcie", ("a10",),
        A10_DATASHEET + ": FP32 31.2, BF16 250 with sparsity (125 dense), 24 GB, 600 GB/s, "
        "PCIe Gen4 x16"),
    "a10g": GpuSpec(
        "A10G 24GB", 24.0, 31.2, 125.0, 600.0, 32.0, "pcie", ("a10g",),
        "no NVIDIA datasheet: AWS's EC2 G5 page (aws.amazon.com/ec2/instance-types/g5) gives "
        "24 GB per A10G; the rates are the A10's, " + A10_DATASHEET + " (the A10 row)",
        "AWS's A10G has no NVIDIA datasheet; it is given the A10's figures, with a warning"),
    "rtx-3070": GpuSpec(
        "GeForce RTX 3070 8GB", 8.0, 20.3, 40.6, 448.0, 32.0, "pcie", ("rtx 3070",),
        GA102_WHITEPAPER + ", appendix A table 'GeForce RTX 3070': FP32 20.3, FP16 tensor "
        "with FP32 accumulate 40.6 dense (BF16 the same), 8 GB GDDR6 448 GB/s, PCIe Gen4 x16",
        "no NVLink"),
    "rtx-3080": GpuSpec(
        "GeForce RTX 3080 10GB", 10.0, 29.8, 59.5, 760.0, 32.0, "pcie", ("rtx 3080",),
        GA102_WHITEPAPER + ", table 1 'GeForce RTX 3080': FP32 29.8, FP16 tensor with FP32 "
        "accumulate 59.5 dense (BF16 the same), 10 GB GDDR6X 760 GB/s, PCIe Gen4 x16",
        "no NVLink"),
    "rtx-3090": GpuSpec(
        "GeForce RTX 3090 24GB", 24.0, 35.6, 71.0, 936.0, 32.0, "pcie", ("rtx 3090",),
        GA102_WHITEPAPER + ", appendix A table 'GeForce RTX 3090': FP32 35.6, FP16 tensor "
        "with FP32 accumulate 71 dense (BF16 the same), 24 GB GDDR6X 936 GB/s, PCIe Gen4 x16",
        "an NVLink bridge between two cards is not modelled: PCIe"),
    "rtx-4080": GpuSpec(
        "GeForce RTX 4080 16GB", 16.0, 48.7, 97.5, 716.8, 32.0, "pcie", ("rtx 4080",),
        ADA_WHITEPAPER + ", appendix table 'RTX 4080 16 GB': FP32 48.7, FP16/BF16 tensor with "
        "FP32 accumulate 97.5 dense, 16 GB GDDR6X 716.8 GB/s, PCIe Gen4 x16",
        "no NVLink; GeForce peer-to-peer over PCIe is disabled by the driver"),
    "rtx-4090": GpuSpec(
        "GeForce RTX 4090 24GB", 24.0, 82.6, 165.2, 1008.0, 32.0, "pcie", ("rtx 4090", "4090"),
        ADA_WHITEPAPER + ", appendix table 'RTX 4090': FP32 82.6, FP16/BF16 tensor with FP32 "
        "accumulate 165.2 dense, 24 GB GDDR6X 1,008 GB/s",
        "no NVLink; GeForce peer-to-peer over PCIe is disabled by the driver"),
    "mi300x": GpuSpec(
        "Instinct MI300X 192GB", 192.0, 163.4, 1307.4, 5300.0, 448.0, "infinity_fabric",
        ("mi300x",),
        "AMD Instinct MI300X data sheet (amd.com/content/dam/amd/en/documents/instinct-tech-"
        "docs/data-sheets/amd-instinct-mi300x-data-sheet.pdf): FP32 vector 163.4, BF16 "
        "1,307.4 dense, 192 GB, 5.3 TB/s, Infinity Fabric 896 GB/s peer (448 per direction)"),
}


def match_name(cuda_name: str) -> str | None:
    """The key of SPECS whose `names` best match a CUDA device name, or None."""
    if not isinstance(cuda_name, str):
        raise ValueError(f"cuda_name={cuda_name!r} is not a string; give the name CUDA "
                         "reports, e.g. 'NVIDIA H100 80GB HBM3'")
    lowered = cuda_name.lower()
    best: tuple[int, str] | None = None
    for key, spec in SPECS.items():
        for name in spec.names:
            whole_word = re.search(rf"(?<![a-z0-9]){re.escape(name)}(?![a-z0-9])", lowered)
            if whole_word and (best is None or len(name) > best[0]):
                best = (len(name), key)
    return None if best is None else best[1]
