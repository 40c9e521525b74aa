"""Published numbers and statements the myths lab cites, each with its exact source.

Nothing here is measured on this machine: every value is copied from the source named
beside it (document, section, table or quoted sentence). Where no exact published number
was found, none is given (`NOT_FOUND`), and the check it would feed says so.
"""

from __future__ import annotations

from dataclasses import dataclass

HF_MULTI_GPU = ("Hugging Face transformers docs, 'Efficient Training on Multiple GPUs' "
                "(docs/source/en/perf_train_gpu_many.md, "
                "https://huggingface.co/docs/transformers/perf_train_gpu_many), section "
                "'Data Parallelism' > 'DataParallel vs DistributedDataParallel'")
ZERO_PAPER = ("Rajbhandari et al., 'ZeRO: Memory Optimizations Toward Training Trillion "
              "Parameter Models', SC20, arXiv:1910.02054")
NCCL_GUIDE = ("NVIDIA NCCL User Guide, 'Creating a Communicator' "
              "(https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/usage/"
              "communicators.html)")


@dataclass(frozen=True)
class Published:
    """One published value: what it is, the value, its unit, and where it is printed."""

    what: str
    value: float
    unit: str
    cite: str


# GPT-2 (run_clm.py, wikitext-2, 200 steps, per_device_train_batch_size 4) on 2 x TITAN RTX
# 24GB joined by NVLink (NV2); pytorch-1.8-to-be, cuda-11.0, transformers 4.3.0.dev0.
_HF_RUN = (f"{HF_MULTI_GPU}: 2 x TITAN RTX 24GB with 2 NVLinks, GPT-2 run_clm.py, 200 steps, "
           "per_device_train_batch_size 4, printed train_runtime")
HF_DP_S = Published("DataParallel, 2 GPUs", 110.5948, "s", _HF_RUN)
HF_DDP_NVLINK_S = Published("DDP, 2 GPUs, NVLink", 101.9003, "s", _HF_RUN)
HF_DDP_NO_NVLINK_S = Published("DDP, 2 GPUs, NCCL_P2P_DISABLE=1 (no NVLink)", 131.4367, "s",
                               _HF_RUN)

# What the same section states in words (quoted from its list 'Key differences').
HF_GPU0_MORE_WORK = (f"{HF_MULTI_GPU}, 'Key differences' item 2: \"Under DP, GPU 0 performs "
                     "significantly more work than other GPUs, resulting in GPU "
                     "under-utilization.\"")
HF_DDP_ONE_EXCHANGE = (f"{HF_MULTI_GPU}, 'Key differences' item 1: \"DDP performs only a "
                       "single communication per batch - sending gradients, while DP performs "
                       "five different data exchanges per batch.\"")
HF_DP_EXCHANGES_PER_BATCH = 5
HF_DDP_EXCHANGES_PER_BATCH = 1

# Traffic per step per device, in units of the model size Psi (the paper's analysis).
ZERO_DP_TRAFFIC = Published("data parallel (all-reduce = reduce-scatter + all-gather)", 2.0,
                            "x model size", f"{ZERO_PAPER}, Section 7.1")
ZERO_3_TRAFFIC = Published("ZeRO-DP P_os+g+p (parameters all-gathered in forward and in "
                           "backward, gradients reduce-scattered)", 3.0, "x model size",
                           f"{ZERO_PAPER}, Section 7.2.2 (1.5x the data-parallel volume)")

NCCL_ONE_DEVICE_PER_RANK = (f"{NCCL_GUIDE}: \"Using the same CUDA device multiple times as "
                            "different ranks of the same NCCL communicator is not supported "
                            "and may lead to hangs.\"")

NOT_FOUND = "no published measurement found"
DP_3_TO_4_GPUS = (f"{NOT_FOUND} of DataParallel against DDP on 3 or 4 GPUs; the published "
                  f"run above has 2 GPUs")
