"""The course: chapters in order, and what each runs for real on a given machine."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Chapter:
    """One notebook of the course."""

    number: int
    notebook: str  # file name in notebooks/
    title: str
    real_cpu: str  # what runs for real on a CPU-only machine
    real_gpu: str  # what runs for real with enough GPUs
    gpus_for_real: int  # fewest GPUs at which the notebook's GPU path runs (0: it has none)
    simulated: str  # what dpsim simulates in this chapter


CHAPTERS: tuple[Chapter, ...] = (
    Chapter(0, "00_start_here.ipynb", "Start here", "the doctor's report", "the doctor's report",
            0, "nothing"),
    Chapter(1, "01_single_device.ipynb", "Single device: time and memory of a training step",
            "training an MLP on the CPU, memory by real tensors",
            "the same on GPU 0 with torch.cuda memory statistics", 1,
            "memory and step time for any batch, model preset and device"),
    Chapter(2, "02_collectives.ipynb", "Collectives and the all-reduce ring",
            "collectives on gloo processes, a hand-written ring all-reduce",
            "collectives on gloo processes, a hand-written ring all-reduce", 0,
            "alpha-beta cost of every collective at any scale"),
    Chapter(3, "03_data_parallel.ipynb", "DataParallel: scatter, replicate, gather",
            "DataParallel re-enacted with threads over virtual devices",
            "the real nn.DataParallel on up to 4 GPUs, timed and measured per device", 2,
            "DP timeline and memory per device for any N"),
    Chapter(4, "04_gil.ipynb", "The GIL: threads against processes",
            "threads vs processes, measured", "threads vs processes, measured", 0,
            "GIL model: timeline and speed-up"),
    Chapter(5, "05_ddp.ipynb", "DistributedDataParallel: buckets and overlap",
            "DDP on gloo processes, buckets recorded, torchrun", "DDP over NCCL", 2,
            "DDP buckets, overlap and scaling"),
    Chapter(6, "06_fsdp.ipynb", "FSDP and ZeRO: memory per device",
            "FSDP2 on gloo processes, shards measured", "FSDP2 over NCCL", 2,
            "FSDP timeline and memory, ZeRO stages 0-3"),
    Chapter(7, "07_choosing_a_strategy.ipynb", "Choosing a strategy at cluster scale",
            "DDP and FSDP2 on 2 gloo ranks: model-state bytes per rank beside the planner's",
            "DDP and FSDP2 on 2 gloo ranks: model-state bytes per rank beside the planner's", 0,
            "every strategy on clusters up to 1024 devices"),
    Chapter(8, "08_myths_lab.ipynb", "Myths lab: popular claims tested",
            "claims measured on gloo processes, DP re-enacted on threads, torch's source; "
            "the GPU claims (4, 10, 11, 15, 16, 17) judged on cited published measurements, "
            "claim 17's own run untested here",
            "the same, plus claim 17 run for real where NCCL is available (two NCCL ranks "
            "on one GPU, inside a timeout); with 2 GPUs, claim 4's peak memory per GPU", 1,
            "the claims about scale, shown as what the model says (never deciding)"),
    Chapter(9, "09_precision_and_memory.ipynb",
            "Precision and memory: mixed precision, checkpointing, clipping, meta init",
            "autocast bf16; FSDP2 mixed precision, checkpointed blocks, clipping, meta-device "
            "init, ZeRO-1 and CPU offload (unpinned) on gloo processes",
            "autocast fp16 with a GradScaler on GPU 0, besides the CPU runs", 1,
            "torch's and ZeRO's precision schemes per ZeRO stage, checkpointing, offload"),
    Chapter(10, "10_checkpoints_and_failures.ipynb", "Checkpoints, resharding and failures",
            "DDP and FSDP2 checkpoints, resharding 2 -> 1 and 4 ranks, HSDP on a 2-D mesh, a "
            "rank killed under torchrun and restarted, a hung collective, Join (gloo)",
            "DDP and FSDP2 checkpoints, resharding 2 -> 1 and 4 ranks, HSDP on a 2-D mesh, a "
            "rank killed under torchrun and restarted, a hung collective, Join (gloo)", 0,
            "HSDP traffic per mesh dimension (full, hybrid, none)"),
    Chapter(11, "11_how_far_to_trust_dpsim.ipynb", "Appendix: how far to trust dpsim",
            "dist.all_reduce timed on gloo processes, the alpha-beta fit's held-out error",
            "dist.all_reduce timed on gloo processes, the alpha-beta fit's held-out error", 0,
            "every published nccl-tests point beside dpsim's prediction; NCCL's protocol "
            "choice"),
    Chapter(12, "12_on_a_cluster.ipynb", "On a cluster: Slurm and torchrun",
            "a real Slurm on this machine (two nodes on 127.0.0.1): DDP under srun torchrun "
            "and under srun alone, a node lost and the FSDP2 job requeued from its DCP "
            "checkpoint (gloo)",
            "a real Slurm on this machine (two nodes on 127.0.0.1): DDP under srun torchrun "
            "and under srun alone, a node lost and the FSDP2 job requeued from its DCP "
            "checkpoint (gloo)", 0,
            "the planner's prediction in the job python -m dpsim plan --sbatch writes"),
    Chapter(13, "13_training_at_scale_correctly.ipynb", "Training at scale correctly",
            "DDP on 1, 2 and 4 gloo processes: global batch and learning rate, a token-mean "
            "loss over ranks, evaluation without the sampler's copies, a hang shown safely, "
            "an exact resume checked sample by sample",
            "DDP on 1, 2 and 4 gloo processes: global batch and learning rate, a token-mean "
            "loss over ranks, evaluation without the sampler's copies, a hang shown safely, "
            "an exact resume checked sample by sample", 0, "nothing"),
)


def plan(n_gpus: int, nccl: bool) -> list[dict[str, str]]:
    """Per chapter: what runs for real here and what is simulated."""
    rows = []
    for ch in CHAPTERS:
        on_gpu = ch.gpus_for_real > 0 and n_gpus >= ch.gpus_for_real and (
            nccl or ch.gpus_for_real == 1)
        if on_gpu:
            real = ch.real_gpu
        elif ch.gpus_for_real > 1 and n_gpus >= 1:
            real = f"{ch.real_cpu} (GPU path needs {ch.gpus_for_real} GPUs and NCCL)"
        else:
            real = ch.real_cpu
        rows.append({"notebook": ch.notebook, "title": ch.title, "real here": real,
                     "simulated": ch.simulated})
    return rows
