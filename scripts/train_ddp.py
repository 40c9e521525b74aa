"""Train a small model with DDP under torchrun (written by notebooks/05_ddp.ipynb).

    torchrun --standalone --nproc-per-node=2 scripts/train_ddp.py --steps 5
"""
import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=5)
parser.add_argument("--batch-size", type=int, default=16)  # per process
args = parser.parse_args()

# torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
local_rank = int(os.environ["LOCAL_RANK"])
on_gpu = torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
if on_gpu:
    torch.cuda.set_device(local_rank)
dist.init_process_group("nccl" if on_gpu else "gloo")  # reads the variables above
rank, world_size = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", local_rank) if on_gpu else torch.device("cpu")
if rank == 0:
    print(f"world_size {world_size}, backend {dist.get_backend()}", flush=True)

g = torch.Generator().manual_seed(0)  # the same data and model on every rank
x_all, y_all = torch.randn(512, 48, generator=g), torch.randint(0, 10, (512,), generator=g)
dataset = TensorDataset(x_all, y_all)
torch.manual_seed(0)
net = nn.Sequential(nn.Linear(48, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
model = DDP(net, device_ids=[local_rank] if on_gpu else None)  # broadcasts rank 0's parameters
# each rank its own share of the shuffled indices (rank and world size: from the group)
sampler: DistributedSampler[int] = DistributedSampler(dataset, shuffle=True, seed=0)
loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
opt = torch.optim.SGD(model.parameters(), lr=0.1)

step, epoch = 0, 0
while step < args.steps:
    sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        loss.backward()  # all-reduces the gradients, bucket by bucket
        opt.step()
        step += 1
        if step == args.steps:
            break
    epoch += 1

checksum = sum(p.detach().double().abs().sum().item() for p in model.parameters())
print(f"rank {rank}/{world_size}: final loss {loss.item():.4f}, checksum {checksum:.6f}",
      flush=True)
dist.barrier()  # no rank leaves while a peer still talks to it
dist.destroy_process_group()
os._exit(0)  # skip Python's teardown: gloo's threads outlive it (dpsim.runtime.process_exit)
