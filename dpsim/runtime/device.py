"""Pick the torch device for a real run, falling back to the CPU with a message."""

from __future__ import annotations

import torch

from dpsim.sim import require_choice


def resolve_device(requested: str = "auto") -> tuple[torch.device, str]:
    """Return (device, note): "auto" takes CUDA when usable; an unusable "cuda" falls back."""
    require_choice("device", requested.split(":")[0], ("auto", "cpu", "cuda"))
    if requested == "cpu":
        return torch.device("cpu"), "running on the CPU (asked for)"
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        dev = torch.device("cuda" if requested == "auto" else requested)
        index = dev.index or 0
        if index >= torch.cuda.device_count():
            return torch.device("cpu"), (
                f"device={requested!r} does not exist (this machine has "
                f"{torch.cuda.device_count()} GPU); falling back to the CPU")
        return dev, f"running on {torch.cuda.get_device_name(index)} ({dev})"
    if requested == "auto":
        return torch.device("cpu"), "no CUDA GPU here: running on the CPU"
    return torch.device("cpu"), (
        f"device={requested!r} was asked for but torch.cuda.is_available() is False here; "
        "falling back to the CPU")


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work so wall-clock timings are real (no-op on the CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
