"""The printed torchrun commands name this OS's loopback interface, or none."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from dpsim.runtime.torchrun_commands import loopback_interface, torchrun_commands

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path("scripts", "train_ddp.py")


@pytest.mark.parametrize(("names", "expected"), [
    (["lo", "eth0"], "lo"),  # Linux
    (["lo0", "gif0", "stf0", "en0"], "lo0"),  # macOS
    (["ethernet_32768", "loopback_0"], "loopback_0"),  # Windows' own loopback name
    (["eth0", "wlan0"], None),
])
def test_loopback_name_per_os(monkeypatch: pytest.MonkeyPatch, names: list[str],
                              expected: str | None) -> None:
    monkeypatch.setattr(socket, "if_nameindex", lambda: list(enumerate(names, 1)))
    assert loopback_interface() == expected


def test_commands_carry_the_interface_or_leave_it_out() -> None:
    mac = torchrun_commands(SCRIPT, port=29500, ifname="lo0", torchrun=Path("torchrun"))
    assert mac[1] == f"GLOO_SOCKET_IFNAME=lo0 torchrun --standalone --nproc_per_node=2 {SCRIPT}"
    assert mac[3].endswith(f"--node_rank=0 --rdzv-endpoint=127.0.0.1:29500 {SCRIPT}")
    assert all(ln.startswith(("#", "GLOO_SOCKET_IFNAME=lo0 ")) for ln in mac)
    bare = torchrun_commands(SCRIPT, port=29500, ifname=None, torchrun=Path("torchrun"))
    assert not any("GLOO_SOCKET_IFNAME" in ln for ln in bare)
    assert len(bare) == 5
    with pytest.raises(ValueError, match="port=0"):
        torchrun_commands(SCRIPT, port=0)


def test_no_command_hard_codes_linux_loopback() -> None:
    texts = [(ROOT / "scripts" / "train_ddp.py").read_text()]
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        texts += ["".join(c["source"]) for c in json.loads(nb.read_text())["cells"]]
    assert not any("GLOO_SOCKET_IFNAME=lo " in t for t in texts)
