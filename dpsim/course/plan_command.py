"""`python -m dpsim plan`: the planner's prediction for a model on a cluster preset, and
with `--sbatch FILE` the Slurm job that runs it.

    python -m dpsim plan --model llama-7b --cluster dgx-h100 --nodes 4 --strategy fsdp

prints the simulated step (memory per GPU, step time, communication per step, whether it
fits) with the preset it used; `--sbatch job.sh` also writes the batch script
(`runtime.slurm_script`) with that prediction and its assumptions in its header. Every
number here is simulated. A wrong name is a ValueError naming the option and what is
allowed; the command prints it and exits with 2.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from dpsim.runtime.slurm_script import JobSpec, sbatch_script
from dpsim.sim import (
    CLUSTERS,
    PLANNER_PRECISIONS,
    PRESETS,
    Cluster,
    PlanResult,
    get_cluster,
    get_workload,
    plan,
    require_choice,
    require_int,
    strategy_names,
)

MAX_DEVICES = 1024  # the planner's largest cluster (GPUs)
MAX_BATCH_PER_GPU = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `plan` (names are checked in `main`, which lists the allowed ones)."""
    parser.add_argument("--model", required=True, help="a model preset, e.g. llama-7b")
    parser.add_argument("--cluster", required=True, help="a cluster preset, e.g. dgx-h100: "
                        "its device, GPUs per node and links")
    parser.add_argument("--nodes", type=int, default=1, help="nodes of the preset's kind")
    parser.add_argument("--strategy", default="fsdp", help="ddp, fsdp, zero1, ... (fsdp)")
    parser.add_argument("--batch-per-gpu", type=int, default=1, help="samples per GPU per step")
    parser.add_argument("--precision", default="default",
                        help="default (the strategy's torch default), fp32, mixed, torch_amp")
    parser.add_argument("--sbatch", default=None, metavar="FILE",
                        help="write the Slurm batch script here")
    parser.add_argument("--gpus-per-node", type=int, default=None,
                        help="the job's GPUs per node: the preset's (default), or 0 for a CPU "
                        "job with gloo on a test cluster (one rank per node)")
    parser.add_argument("--train", default="train.py",
                        help="what each rank runs: your training script and its arguments")
    parser.add_argument("--partition", default="", help="Slurm partition (cluster default)")
    parser.add_argument("--account", default="", help="Slurm account (cluster default)")
    parser.add_argument("--time", default="01:00:00", help="Slurm time limit")
    parser.add_argument("--port", type=int, default=29500, help="rendezvous port, first node")


@dataclass(frozen=True)
class Prediction:
    """The planner's step for a model preset on whole nodes of a cluster preset."""

    model: str
    cluster_name: str  # the preset's key, e.g. "dgx-h100"
    cluster: Cluster  # the preset (one node's worth; the plan resizes it)
    nodes: int
    precision: str
    result: PlanResult


def predict(model: str, cluster: str, nodes: int, strategy: str, batch_per_gpu: int,
            precision: str = "default") -> Prediction:
    """Simulate one step of `strategy` on `nodes` whole nodes of the preset `cluster`."""
    require_choice("--model", model, PRESETS)
    require_choice("--cluster", cluster, tuple(CLUSTERS))
    require_choice("--strategy", strategy, strategy_names())
    require_choice("--precision", precision, PLANNER_PRECISIONS)
    preset = get_cluster(cluster)
    require_int("--nodes", nodes, 1, MAX_DEVICES // preset.devices_per_node)
    require_int("--batch-per-gpu", batch_per_gpu, 1, MAX_BATCH_PER_GPU)
    n = nodes * preset.devices_per_node
    result = plan(get_workload(model), preset, strategy, n, n * batch_per_gpu,
                  precision=precision)
    return Prediction(model, cluster, preset, nodes, precision, result)


def report_lines(p: Prediction) -> list[str]:
    """The prediction and its assumptions, one line each (printed and in the header)."""
    r, c, dev = p.result, p.cluster, p.cluster.device
    gib = 1024**3
    peak = max(r.peak_bytes)
    fits = "fits" if r.fits else f"does NOT fit ({len(r.oom_devices)} of {r.n_devices} GPUs)"
    links = f"{c.intra_node.name} {c.intra_node.bandwidth_GBps:g} GB/s in a node"
    if p.nodes > 1:
        inter = c.inter_node.name if c.inter_node else "InfiniBand NDR (default)"
        bw = c.inter_node.bandwidth_GBps if c.inter_node else 50.0
        links += f"; {inter} {bw:g} GB/s between nodes"
    workload = get_workload(p.model)
    seq = workload.meta.get("seq_len")
    return [
        f"dpsim plan (simulated, not measured): {p.model}, {r.label} on {p.nodes} node(s) "
        f"x {c.devices_per_node} GPUs = {r.n_devices} GPUs",
        f"cluster preset {p.cluster_name}: {c.name}",
        f"  device: {dev.name}, {dev.memory_GiB:g} GiB, {dev.bf16_tflops:g} bf16 TFLOP/s "
        f"peak at {dev.efficiency:.0%} efficiency",
        f"  links: {links}",
        f"memory per GPU: {peak / gib:.1f} GiB of {r.memory_bytes / gib:.0f} GiB: {fits}",
        f"step time: {r.step_s * 1e3:.1f} ms (compute {r.compute_s * 1e3:.1f} ms, "
        f"communication hidden {r.hidden_comm_s * 1e3:.1f} ms, exposed "
        f"{r.exposed_comm_s * 1e3:.1f} ms)",
        f"communication per step: {r.traffic_bytes_per_device / 1e9:.2f} GB sent per GPU",
        f"throughput: {r.samples_per_s:.1f} samples/s, scaling efficiency "
        f"{r.scaling_efficiency:.0%}",
        "assumptions:",
        f"  model preset {p.model}: {workload.n_params / 1e9:.2f} B parameters"
        + (f", sequence {seq}" if seq else ""),
        f"  global batch {r.global_batch} ({r.batch_per_device} per GPU), precision "
        f"{p.precision}" + (" (the strategy's torch default)" if p.precision == "default"
                            else "") + ", Adam, no activation checkpointing",
        "  the preset's device and links, not your cluster's measured ones",
    ]


def job_spec(p: Prediction, args: argparse.Namespace, command: str) -> JobSpec:
    """The job for the prediction: whole nodes, one rank per GPU (or one CPU rank)."""
    per_node = p.cluster.devices_per_node
    gpus = per_node if args.gpus_per_node is None else args.gpus_per_node
    if gpus not in (0, per_node):
        raise ValueError(f"--gpus-per-node={gpus} is not allowed; allowed: {per_node} "
                         f"({p.cluster_name}'s GPUs per node, what the prediction is for) "
                         "or 0 (a CPU job with gloo, for a test cluster)")
    header = [f"written by: {command}", ""]
    header += report_lines(p)
    header += ["", f"each node: torchrun starts {gpus or 1} rank(s) running: {args.train}"]
    if not gpus:
        header.append(f"CPU job (gloo) for a test cluster: the prediction is for "
                      f"{p.cluster_name}'s GPUs, not for this job")
    return JobSpec(nodes=p.nodes, nproc_per_node=gpus or 1, gpus_per_node=gpus,
                   train=args.train, job_name=f"dpsim-{p.model}-{p.result.strategy}",
                   time=args.time, partition=args.partition, account=args.account,
                   port=args.port, header=header)


def main(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Print the prediction; with --sbatch write the job script. 2 on a wrong value."""
    try:
        p = predict(args.model, args.cluster, args.nodes, args.strategy, args.batch_per_gpu,
                    args.precision)
        if args.sbatch is not None:
            words = sys.argv[1:] if argv is None else list(argv)
            spec = job_spec(p, args, "python -m dpsim " + shlex.join(words))
    except ValueError as e:
        print(f"python -m dpsim plan: error: {e}", file=sys.stderr)
        return 2
    print("\n".join(report_lines(p)))
    if args.sbatch is not None:
        path = Path(args.sbatch)
        path.write_text(sbatch_script(spec))
        path.chmod(0o755)
        print(f"wrote {path}: sbatch {path}")
    return 0
