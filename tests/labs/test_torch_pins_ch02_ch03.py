"""What chapters 2 and 3 teach about torch, read from the installed torch.

If torch changes one of these behaviours, the chapter's text is wrong: these tests fail
first. Chapter 2: all_reduce, all_gather and reduce_scatter have no root argument, the
rooted collectives do. Chapter 3: DataParallel's docstring recommends DDP even on a single
node, keeps only device 0's in-place buffer updates, and `replicate` gives replicas other
than device 0 their own buffer copies; on a machine without CUDA, DataParallel keeps no
device_ids and calls the module.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import replicate as replicate_module_file

ROOTLESS = ("all_reduce", "all_gather", "reduce_scatter", "reduce_scatter_tensor",
            "all_gather_into_tensor")
ROOTED = {"broadcast": "src", "scatter": "src", "gather": "dst", "reduce": "dst"}
ROOT_NAMES = {"src", "dst", "group_src", "group_dst"}


def test_rootless_collectives_take_no_root() -> None:
    for name in ROOTLESS:
        params = set(inspect.signature(getattr(dist, name)).parameters)
        assert not params & ROOT_NAMES, f"dist.{name} now takes a root: {params & ROOT_NAMES}"


def test_rooted_collectives_take_their_root() -> None:
    for name, root in ROOTED.items():
        assert root in inspect.signature(getattr(dist, name)).parameters, name


def _dp_doc() -> str:
    return " ".join((nn.DataParallel.__doc__ or "").split())


def test_dataparallel_docstring_recommends_ddp_even_on_one_node() -> None:
    doc = _dp_doc()
    assert re.search(r"It is recommended to use :class:`~torch\.nn\.parallel\."
                     r"DistributedDataParallel`, instead of this class, to do multi-GPU "
                     r"training, even if there is only a single node", doc), doc[:400]


def test_dataparallel_docstring_keeps_only_device0_buffer_updates() -> None:
    doc = _dp_doc()
    assert "any updates to the running module in ``forward`` will be lost" in doc
    assert "the replica on ``device[0]`` will have its parameters and buffers sharing storage" \
        in doc


def test_replicate_broadcasts_buffers_to_every_device() -> None:
    source = Path(inspect.getfile(replicate_module_file)).read_text(encoding="utf-8")
    body = source[source.index("def replicate("):]
    assert "buffer_copies_not_rg = _broadcast_coalesced_reshape(" in body
    assert "buffers_not_rg, devices, detach=True" in body


def test_dataparallel_on_a_machine_without_cuda_calls_the_module() -> None:
    model = nn.Linear(3, 2)
    dp = nn.DataParallel(model, device_ids=None, output_device=None, dim=0)
    if torch.cuda.is_available():  # with CUDA: every visible GPU
        assert dp.device_ids == list(range(torch.cuda.device_count()))
        return
    assert dp.device_ids == []
    x = torch.ones(4, 3)
    assert torch.equal(dp(x), model(x))
