"""Clusters: nodes of identical devices, an intra-node fabric and NICs; plain data.

Which link a process group of a cluster sees, and what a collective over it costs, are the
collective model's questions: `dpsim.sim.collectives.group_cost` (`group_link`,
`group_time_s`). Presets live in `dpsim.sim.hardware.presets`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated

from dpsim.sim.checks import Int, check_fields, checked
from dpsim.sim.hardware.device import Device
from dpsim.sim.hardware.link import INFINIBAND_NDR, Link
from dpsim.sim.limits import MAX_DEVICES_PER_NODE, MAX_NICS_PER_NODE, MAX_NODES, WorldSize


@dataclass(frozen=True)
class Cluster:
    """`n_nodes` nodes of `devices_per_node` identical devices.

    A node is its devices, an intra-node fabric (`intra_node`: NVLink/NVSwitch, PCIe;
    `nvls`: the switch reduces in place, NVLink SHARP) and `nics_per_node` NICs of
    `inter_node` each (0: one per device, as on DGX and HGX nodes). `rail_optimized`: NIC i
    of every node is cabled to the same leaf switch (rail i), as in NVIDIA's DGX SuperPOD
    designs, so a ring's inter-node hop crosses one switch; False: nodes hang on shared
    leaves and hops cross the spine (`dpsim.sim.collectives.group_cost.fabric_cluster`).
    """

    name: str
    device: Device
    devices_per_node: Annotated[int, Int(1, MAX_DEVICES_PER_NODE)]
    n_nodes: Annotated[int, Int(1, MAX_NODES)]
    intra_node: Link  # between devices of one node (NVLink, PCIe, shared memory)
    inter_node: Link | None = None  # one NIC (InfiniBand, RoCE, EFA, Ethernet); None: one node
    nics_per_node: Annotated[int, Int(0, MAX_NICS_PER_NODE)] = 0  # NICs of `inter_node` per
    # node; 0 = one per device
    nvls: bool = False  # in-switch reduction (NVLink SHARP, H100/H200/B200 NVSwitch)
    rail_optimized: bool = True  # NIC i of every node on leaf switch i (see above)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.n_nodes > 1 and self.inter_node is None:
            raise ValueError(
                f"inter_node=None with n_nodes={self.n_nodes}; give an inter-node Link"
            )

    @property
    def nics(self) -> int:
        """NICs per node (`nics_per_node`, or one per device when it is 0)."""
        return self.nics_per_node or self.devices_per_node

    @property
    def world_size(self) -> int:
        """Total number of devices."""
        return self.devices_per_node * self.n_nodes

    @checked
    def with_devices(self, n_devices: WorldSize) -> Cluster:
        """The same kind of cluster resized to `n_devices` (filling nodes first)."""
        if n_devices > self.devices_per_node * MAX_NODES:
            raise ValueError(f"n_devices={n_devices!r} is out of range; allowed >= 1 and <= "
                             f"{self.devices_per_node * MAX_NODES} ({MAX_NODES} nodes of "
                             f"{self.devices_per_node})")
        if n_devices <= self.devices_per_node:
            return replace(self, devices_per_node=n_devices, n_nodes=1)
        n_nodes = math.ceil(n_devices / self.devices_per_node)
        if n_devices % self.devices_per_node:
            raise ValueError(
                f"n_devices={n_devices} does not fill whole nodes of {self.devices_per_node}; "
                f"allowed: 1..{self.devices_per_node} or a multiple of {self.devices_per_node}"
            )
        inter = self.inter_node or INFINIBAND_NDR
        return replace(self, n_nodes=n_nodes, inter_node=inter)
