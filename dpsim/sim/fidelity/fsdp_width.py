"""A compute efficiency that rises with the transformer's width, for the FSDP throughput
family (`fsdp_scale`); dpsim's `Device.efficiency` elsewhere stays one number per device.

Why: the published hardware FLOPS utilisation (HFU, recompute counted) of one code base on
one cluster rises with the model: pytorch/pytorch.github.io
`_posts/2024-03-13-maximizing-training.md` at 2ad10059d3021d0f902f1204db98e5c930532be8,
Table 1, HFU 0.57 (7B, width 4096), 0.64 (34B) and 0.67 (70B, width 8192) on A100, 0.37,
0.44 and 0.45 on H100. Its HFU / MFU ratios of the 34B and 70B rows (1.32 to 1.38) are the
4/3 of recomputing every block's forward: the checkpointing there is full, not selective.

Model (a shape, not a measurement): per token and block, the matmuls' FLOPs grow as h^2 and
run at the peak times e_inf; the rest of the block (norms, activations, rotary, residual
adds, casts) moves bytes that grow as h at the memory bandwidth. The block then takes
matmul_time * (1 + h0 / h), an efficiency e_inf * h / (h + h0), with
h0 = KAPPA * peak FLOP/s / memory bandwidth (the device's FLOPs per byte): the same bytes
cost more matmul time on a device with more FLOPs per byte. KAPPA is one number for every
device, fitted on the training point the dataset names (`width_law.train_on`); a series'
own efficiency is still fitted on its `fit_on` point, so only the ratio
factor(h) = eff(h) / eff(h_fit) is applied to its other points.
"""

from __future__ import annotations

from dpsim.sim.hardware import Device

KAPPA_RANGE = (0.0, 200.0)  # searched by bisection; 0 is a flat efficiency


def h0(kappa: float, device: Device) -> float:
    """The width (elements) at which the non-matmul time equals the matmul time:
    kappa * bf16 peak FLOP/s / memory bytes/s."""
    return kappa * device.bf16_tflops * 1e12 / (device.mem_bw_GBps * 1e9)


def factor(kappa: float, device: Device, width: int, fit_width: int) -> float:
    """Efficiency at `width` over the efficiency at `fit_width` (both d_model, elements)."""
    w0 = h0(kappa, device)
    return (width / (width + w0)) / (fit_width / (fit_width + w0))


def elementwise_bytes(width: int, d_ff: int) -> int:
    """Bytes per token one Llama block's elementwise operators read and write in forward
    (bf16): two RMSNorms (read h, write h), rotary on q and k (read and write 2h), SwiGLU
    (read 2 d_ff, write d_ff), two residual adds (read 2h, write h): 28 h + 6 d_ff."""
    return 28 * width + 6 * d_ff


def bytes_ratio(kappa: float, e_inf: float, matmul_flops: float, width: int,
                d_ff: int) -> float:
    """The bytes per token and block the law's non-matmul time would move at full memory
    bandwidth, over `elementwise_bytes`: matmul time * h0 / h at bandwidth BW is
    matmul_flops * kappa / (e_inf * h) bytes (`matmul_flops`: forward, per token)."""
    return matmul_flops * kappa / (e_inf * width) / elementwise_bytes(width, d_ff)
