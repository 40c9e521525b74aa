"""HSDP (hybrid sharded data parallel): FSDP inside groups of `shard_size` devices, data
parallel across the `world_size / shard_size` groups.

The FSDP paper (Zhao et al. 2023, "PyTorch FSDP: Experiences on Scaling Fully Sharded Data
Parallel", VLDB 16(12), Section 3.2, "Sharding Strategies") names the sharding factor F:
F = W is full sharding, F = 1 full replication (DDP), 1 < F < W hybrid sharding. With a
2-D device mesh (replicate x shard), each step of a hybrid run

* all-gathers every unit's parameters inside its shard group, in forward and again in
  backward, and reduce-scatters its gradients there (as FSDP over F devices);
* all-reduces each gradient shard (1/F of the gradients) across the R = W/F replicas.

Per device and step, on a ring (M = model bytes in the communication dtype):
full 3(W-1)/W M; hybrid 3(F-1)/F M + 2(R-1)/R M/F; none 2(W-1)/W M
(`hsdp_traffic`). The strategies and F follow the paper; the byte counts are the ring costs
(`collectives.cost`) of the collectives it names, not numbers quoted from it.
The simulation is FSDP's unit-by-unit step (`fsdp.step.FSDPStep`) over one
shard group, with a second comm stream ("replicate") for the all-reduces; the optimizer
waits for both streams. The two groups are the mesh's (`collectives.group_cost.mesh_shapes`),
each costed on the links it crosses: the shard group is F ranks of one node (NVLink, NVLS
where the switch has it), the replicate group one rank per node across the nodes (the
network, each rank on its own rail) when F is a node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Annotated, cast

from dpsim.sim.checks import OneOf, check_fields
from dpsim.sim.collectives.group_cost import GROUP_ALGORITHMS, group_time_s, mesh_shapes
from dpsim.sim.cost.memory import OPTIMIZERS, PRECISIONS, precision_dtype
from dpsim.sim.hardware import Cluster
from dpsim.sim.limits import Samples, WorldSize
from dpsim.sim.strategies.base import Placement, StepResult, Strategy
from dpsim.sim.strategies.fsdp.closed_form import ModelParams, ParamBytes
from dpsim.sim.strategies.fsdp.config import FSDPConfig, UnitLayers
from dpsim.sim.strategies.fsdp.step import FSDPState, FSDPStep
from dpsim.sim.strategies.inputs import require_state
from dpsim.sim.trace import Event, SimState, Trace
from dpsim.sim.workload import Workload


@dataclass(frozen=True)
class HSDPConfig:
    """One HSDP step; world_size comes from the Cluster, shard_size must divide it."""

    batch_size: Samples = 8  # samples per device per step
    shard_size: WorldSize = 8  # F: devices one model copy is sharded over (a node, typically)
    # "fp32", "mixed" (bf16 compute, fp32 master) or "bf16"
    precision: Annotated[str, OneOf(PRECISIONS)] = "mixed"
    optimizer: Annotated[str, OneOf(OPTIMIZERS)] = "adam"  # one of memory.OPTIMIZERS
    reshard_after_forward: bool = True  # free gathered parameters after forward
    layers_per_unit: UnitLayers = 1  # consecutive workload layers wrapped as one FSDP unit
    # "auto" (NCCL's choice; ring on generic links) or forced, one of
    # collectives.group_cost.GROUP_ALGORITHMS
    algorithm: Annotated[str, OneOf(GROUP_ALGORITHMS)] = "auto"

    def __post_init__(self) -> None:
        check_fields(self)

    @property
    def dtype(self) -> str:
        """Dtype of compute, of the gathered parameters and of the gradients sent."""
        return precision_dtype(self.precision)

    def fsdp(self) -> FSDPConfig:
        """The FSDP (ZeRO-3) config of one shard group."""
        return FSDPConfig(batch_size=self.batch_size, stage=3, precision=self.precision,
                          optimizer=self.optimizer,
                          reshard_after_forward=self.reshard_after_forward,
                          layers_per_unit=self.layers_per_unit, algorithm=self.algorithm)


@dataclass(frozen=True)
class HSDPTraffic:
    """Bytes one device sends per step along each mesh dimension (a ring in each group)."""

    mode: str  # "full" (F = W), "hybrid" (1 < F < W), "none" (F = 1, DDP)
    shard_bytes: int  # all-gathers and reduce-scatters inside the shard group
    replicate_bytes: int  # all-reduces of gradient shards across the replicas

    @property
    def total_bytes(self) -> int:
        """Both dimensions together."""
        return self.shard_bytes + self.replicate_bytes


def replicas(shard_size: int, world_size: int) -> int:
    """R = world_size / shard_size; ValueError naming shard_size unless it divides."""
    if shard_size > world_size or world_size % shard_size:
        raise ValueError(f"shard_size={shard_size} does not divide world_size={world_size}; "
                         f"allowed: a divisor of {world_size}")
    return world_size // shard_size


def check_mesh(cluster: Cluster, config: HSDPConfig) -> None:
    """The shard groups tile `cluster`: shard_size divides its world and fills whole nodes
    (or fits in one)."""
    replicas(config.shard_size, cluster.world_size)
    d, f = cluster.devices_per_node, config.shard_size
    if f > d and f % d:
        raise ValueError(f"shard_size={f} does not fill whole nodes of {d}; allowed: 1..{d} "
                         f"or a multiple of {d}")


def hsdp_traffic(n_params: ModelParams, world_size: WorldSize, shard_size: WorldSize,
                 bytes_per_param: ParamBytes = 2, reshard_after_forward: bool = True
                 ) -> HSDPTraffic:
    """Bytes sent per device per step (FSDP paper, Section 3.2: full, hybrid, none).

    Shard group of F: two all-gathers (one without reshard_after_forward) and one
    reduce-scatter of the model, each sending (F-1)/F of it; replicas (R = W/F): one
    all-reduce of the 1/F gradient shard, sending 2(R-1)/R of it.
    """
    r = replicas(shard_size, world_size)
    model, f = n_params * bytes_per_param, shard_size
    transfers = 3 if reshard_after_forward else 2
    mode = "full" if f == world_size else "none" if f == 1 else "hybrid"
    shard = transfers * model * (f - 1) // f
    replicate = 2 * -(-model // f) * (r - 1) // r  # the shard is padded
    return HSDPTraffic(mode, shard, replicate)


@dataclass(frozen=True)
class HSDPState(SimState):
    """What `simulate` hands to `step_result` and `traffic_of`."""

    step: FSDPState  # the whole step: both comm streams, every device of the world
    traffic: HSDPTraffic  # bytes sent per device along each mesh dimension
    replicate_comm_s: float  # busy time of the replicate stream


class HSDPStep(FSDPStep):
    """FSDP's step over one shard group, plus the all-reduces across replicas."""

    def __init__(self, workload: Workload, cluster: Cluster, config: HSDPConfig) -> None:
        self.replicas = cluster.world_size // config.shard_size  # the face checked the mesh
        group = cluster.with_devices(config.shard_size)
        shard_shape, self.rep_shape = mesh_shapes(cluster, config.shard_size)
        super().__init__(workload, group, config.fsdp(), (cluster, shard_shape))
        self.full_cluster = cluster
        self.rep_free = 0.0  # replicate comm stream clock
        self.rep_volume = 0  # all-reduce sizes, counted twice
        self.shard_size = config.shard_size
        self.trace.meta.update({"strategy": "hsdp", "cluster": cluster.name,
                                "world_size": cluster.world_size,
                                "shard_size": config.shard_size, "replicas": self.replicas})

    def comm(self, kind: str, nbytes: int, ready_s: float, label: str) -> tuple[float, float]:
        """Queue a shard-group collective; after a reduce-scatter, all-reduce its output
        shard across the replicas on the replicate stream."""
        start, end = super().comm(kind, nbytes, ready_s, label)
        if kind == "reduce_scatter" and self.replicas > 1 and nbytes:
            size = self.shard(nbytes, True)
            a = max(self.rep_free, end)
            self.rep_free = a + group_time_s("all_reduce", size, self.full_cluster,
                                             self.rep_shape, self.cfg.algorithm)
            self.trace.add(Event(0, "replicate", "all_reduce", a, self.rep_free, size, label))
            self.rep_volume += 2 * size
        return start, end

    def optimizer_step(self, n_params: int, n_tensors: int) -> None:
        """The optimizer waits for the last all-reduce too."""
        self.comm_free = max(self.comm_free, self.rep_free)
        super().optimizer_step(n_params, n_tensors)

    def finish(self, n_params: int) -> HSDPState:
        """The shard group's state, widened to the world and the replicate stream."""
        group = self.group_state(n_params)
        r, world = self.replicas, self.full_cluster.world_size
        rep_s = self.trace.busy_s(0, "replicate")
        rep_sent = self.rep_volume * (r - 1) // r
        f = self.shard_size
        mode = "full" if f == world else "none" if f == 1 else "hybrid"
        step = replace(
            group, world_size=world, comm_s=group.comm_s + rep_s,
            sent_bytes_per_device=group.sent_bytes_per_device + rep_sent,
            summary=replace(group.summary, samples_per_s=self.cfg.batch_size * world
                            / group.step_time_s if group.step_time_s > 0 else float("inf")))
        return HSDPState(step, HSDPTraffic(mode, group.sent_bytes_per_device, rep_sent), rep_s)


def simulate(workload: Workload, cluster: Cluster, config: HSDPConfig) -> Trace:
    """One HSDP step on device 0 (every device runs the same schedule).

    Streams: "compute", "comm" (shard group), "replicate" (all-reduce across replicas).
    Its state (`HSDPState`): the step as `fsdp.simulate`'s, the bytes sent along each
    mesh dimension, and the replicate stream's busy time. `config.shard_size` tiles the
    cluster (`check_mesh`: the face checks it).
    """
    return HSDPStep(workload, cluster, config).run()


def step_result(trace: Trace) -> StepResult:
    """The step of a trace `simulate` made (every device the same)."""
    return cast(HSDPState, trace.state).step.step_result()


def traffic_of(trace: Trace) -> HSDPTraffic:
    """Bytes sent per device along each mesh dimension in a simulated step."""
    return require_state(trace, HSDPState, "hsdp").traffic


PLACEMENT = Placement(
    "the model's states, once per shard group",
    "parameters, gradients, optimizer state within a group; the batch",
    "the model fits a node but not a device, and cross-node bandwidth is scarce")


@dataclass(frozen=True)
class HSDPStrategy(Strategy[HSDPConfig]):
    """HSDP with shard groups of up to one node, as the planner sees it."""

    name: str = "hsdp"
    label: str = "HSDP (shard in a node, replicate across)"
    placement: Placement = PLACEMENT
    config_type = HSDPConfig
    node_size: int = 8  # shard_size the planner uses: min(node_size, n_devices)

    def make_config(self, batch_per_device: int, global_batch: int, n_devices: int,
                    optimizer: str, precision: str) -> HSDPConfig:
        """Shard over min(node_size, n_devices) devices, or the largest divisor below."""
        config = super().make_config(batch_per_device, global_batch, n_devices, optimizer,
                                     precision)
        f = min(self.node_size, n_devices)
        while n_devices % f:
            f -= 1
        return replace(config, shard_size=f)

    def simulate(self, workload: Workload, cluster: Cluster, config: HSDPConfig) -> Trace:
        """See `simulate`; the config's shard groups must tile the cluster (`check_mesh`:
        a config and a cluster meet here, as at the face)."""
        check_mesh(cluster, config)
        return simulate(workload, cluster, config)

    def step_result(self, trace: Trace) -> StepResult:
        """See `step_result`; no crossover terms: two groups on two links have no
        single-link closed form."""
        return step_result(trace)


STRATEGY = HSDPStrategy()
