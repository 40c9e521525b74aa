"""Fuzz-table entries of the topology-aware collective model and the hardware presets
(`dpsim.sim.collectives.nccl`, `dpsim.sim.collectives.group_cost`, `dpsim.sim.hardware.gpu_specs`,
`dpsim.sim.fidelity`)."""

from __future__ import annotations

from benchmarks.api_surface import Arg, EntryPoint, choice, flag, integer, obj
from dpsim.sim import hardware
from dpsim.sim.collectives import group_cost, nccl
from dpsim.sim.hardware import gpu_specs

NAME = "name"
IB4 = hardware.get_cluster("h100-ib-4")
SHAPE = nccl.GroupShape(4, 8)
COLL = choice("collective", "all_reduce", nccl.NCCL_COLLECTIVES)
NB = integer("nbytes", 2**20)
CL = obj("cluster", IB4)
PROTO = choice("protocol", "auto", nccl.PROTOCOL_CHOICES)


def topology_entry_points() -> tuple[EntryPoint, ...]:
    """Every public entry point of the collective model on a topology."""
    return (
        EntryPoint("collectives.nccl.GroupShape", nccl.GroupShape,
                   (integer("n_nodes", 4), integer("ranks_per_node", 8))),
        EntryPoint("collectives.nccl.group_shape", nccl.group_shape,
                   (CL, integer("n_devices", 32, optional=True),
                    integer("ranks_per_node", 8, optional=True))),
        EntryPoint("collectives.nccl.rates", nccl.rates, (CL, obj("shape", SHAPE))),
        EntryPoint("collectives.nccl.available", nccl.available,
                   (COLL, CL, obj("shape", SHAPE))),
        EntryPoint("collectives.nccl.choose", nccl.choose,
                   (COLL, NB, CL, obj("shape", SHAPE), PROTO)),
        EntryPoint("collectives.nccl.pairs", nccl.pairs, (COLL, CL, obj("shape", SHAPE), PROTO)),
        EntryPoint("collectives.nccl.time_terms", nccl.time_terms,
                   (COLL, CL, obj("shape", SHAPE),
                    choice("algorithm", "tree", nccl.NCCL_ALGORITHMS),
                    choice("protocol", "Simple", nccl.PROTOCOL_CHOICES[1:]))),
        EntryPoint("collectives.nccl.nccl_time_s", nccl.nccl_time_s,
                   (COLL, NB, CL, integer("n_devices", 32, optional=True),
                    integer("ranks_per_node", 8, optional=True),
                    choice("algorithm", "auto", nccl.ALGORITHM_CHOICES), PROTO)),
        *group_cost_entry_points(),
        EntryPoint("gpu_specs.match_name", gpu_specs.match_name,
                   (Arg("cuda_name", "NVIDIA H100 80GB HBM3", NAME),)),
        EntryPoint("hardware.device_for_name", hardware.device_for_name,
                   (Arg("cuda_name", "NVIDIA H100 80GB HBM3", NAME),
                    integer("memory_bytes", 80 * 2**30), flag("warn", False))),
    )


def group_cost_entry_points() -> tuple[EntryPoint, ...]:
    """A collective over a process group, as the strategies cost it."""
    algo = choice("algorithm", "auto", group_cost.GROUP_ALGORITHMS)
    return (
        EntryPoint("collectives.group_cost.uses_nccl", group_cost.uses_nccl,
                   (CL, obj("shape", SHAPE))),
        EntryPoint("collectives.group_cost.fabric_cluster", group_cost.fabric_cluster,
                   (obj("cluster", hardware.get_cluster("h100-eth-4")),)),
        EntryPoint("collectives.group_cost.achieved_link", group_cost.achieved_link,
                   (obj("link", hardware.NVLINK4),)),
        EntryPoint("collectives.group_cost.group_link", group_cost.group_link,
                   (CL, obj("shape", SHAPE))),
        EntryPoint("collectives.group_cost.group_time_s", group_cost.group_time_s,
                   (COLL, NB, CL, obj("shape", SHAPE), algo)),
        EntryPoint("collectives.group_cost.mesh_shapes", group_cost.mesh_shapes,
                   (CL, integer("shard_size", 8))),
    )
