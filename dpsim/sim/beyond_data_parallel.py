"""When data parallelism is not enough: where tensor, pipeline and context parallelism come in.

Every data-parallel strategy (DP, DDP, ZeRO-1/2/3, HSDP) gives each device whole samples,
and runs every layer whole on it. Two limits follow, which no sharding of the model
states removes:

* **activations per device**: one sample's activations (at least what one layer keeps,
  even with activation checkpointing) must fit next to the model states, and the gathered
  parameters of one layer must fit too. Tensor parallelism splits every layer's weights
  and activations over devices; context (sequence) parallelism splits a long sequence;
* **the batch-size floor**: at least one sample per device, so N devices need a global
  batch >= N. Past it, more devices give no data-parallel work; tensor and pipeline
  parallelism (layers in stages, micro-batches flowing through) use them instead.

`beyond_data_parallel` checks both with the planner: FSDP / ZeRO-3 (the most frugal data
parallelism) at one sample per device with activation checkpointing. Simulated.
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.sim.hardware import Cluster
from dpsim.sim.limits import Samples
from dpsim.sim.planner import Devices, plan
from dpsim.sim.workload import Workload

GIB = 1024**3


@dataclass(frozen=True)
class BeyondDataParallel:
    """Whether data parallelism can run `workload` on `n_devices`, and what comes in if not.

    Bytes per device; `lowest_peak_bytes` is FSDP's peak at one sample per device with
    activation checkpointing, the least any data-parallel strategy here needs.
    """

    n_devices: int
    global_batch: int
    memory_bytes: int  # one device's memory
    lowest_peak_bytes: int
    one_sample_activation_bytes: int  # what one sample keeps for backward, no checkpointing
    largest_layer_bytes: int  # one layer's parameters as gathered (bf16)
    below_batch_floor: bool  # global_batch < n_devices: some device would get no sample
    advice: tuple[str, ...]  # one line per parallelism that would help

    @property
    def data_parallel_fits(self) -> bool:
        """True when some data-parallel setting fits and every device gets a sample."""
        return self.lowest_peak_bytes <= self.memory_bytes and not self.below_batch_floor


def beyond_data_parallel(workload: Workload, cluster: Cluster, n_devices: Devices,
                         global_batch: Samples) -> BeyondDataParallel:
    """Check the two limits of data parallelism for `workload` on `n_devices` of `cluster`."""
    lowest = plan(workload, cluster, "fsdp", n_devices, n_devices,
                  activation_checkpointing=True)
    memory = lowest.memory_bytes
    peak = max(lowest.peak_bytes)
    act = workload.activation_bytes(1, "bf16")
    layer = 2 * max((lay.n_params for lay in workload.layers), default=0)
    floor = global_batch < n_devices
    advice: list[str] = []
    if peak > memory:
        advice.append(
            f"tensor parallelism: even FSDP at 1 sample per device with checkpointing needs "
            f"{peak / GIB:.1f} GiB of {memory / GIB:.0f} GiB; splitting every layer's weights "
            f"and activations over t devices of a node divides one sample's "
            f"{act / GIB:.2f} GiB of activations and one layer's {layer / GIB:.2f} GiB "
            "of gathered parameters by t")
        advice.append(
            "context parallelism: when long sequences make one sample's activations the "
            "problem, split the sequence over devices (attention exchanges keys and values)")
        advice.append(
            "pipeline parallelism: split the layers into stages, each device holding its "
            "stages' parameters and activations; micro-batches keep the stages busy")
    if floor:
        advice.append(
            f"the batch-size floor: data parallelism gives each device at least one sample, "
            f"so a global batch of {global_batch} uses at most {global_batch} devices; "
            "tensor or pipeline parallelism put the other devices to work on the same samples")
    return BeyondDataParallel(n_devices, global_batch, memory, peak, act, layer, floor,
                              tuple(advice))
