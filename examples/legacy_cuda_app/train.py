"""Train TinyLM on synthetic next-token data. Written for NVIDIA GPUs.

Single GPU:   python train.py --steps 50
Multi GPU:    torchrun --nproc-per-node 8 train.py
Mixed precision uses torch.cuda.amp; distributed runs use NCCL.
"""

import argparse
import csv
import os

import torch
import torch.distributed as dist
from torch.cuda.amp import GradScaler, autocast
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from model import build_model, example_batch, loss_fn
from utils import CudaTimer, describe_device, log_memory, seed_everything


def parse_args():
    parser = argparse.ArgumentParser(description="Train TinyLM on one or more CUDA GPUs")
    parser.add_argument("--device", default="cuda", help="device to train on (cuda, cuda:1, cpu)")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--amp", action="store_true", help="mixed precision with torch.cuda.amp")
    parser.add_argument("--log", default="", help="append step,loss,grad_norm rows to this CSV file")
    parser.add_argument("--save", default="", help="checkpoint path, e.g. checkpoints/cuda_tinylm.pt")
    parser.add_argument("--resume", default="", help="checkpoint to resume from")
    return parser.parse_args()


def setup_distributed():
    """Join the NCCL process group when launched by torchrun; returns (rank, world, local_rank)."""
    if "RANK" not in os.environ:
        return 0, 1, 0
    os.environ.setdefault("NCCL_ASYNC_ERROR_HANDLING", "1")
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    return dist.get_rank(), dist.get_world_size(), local_rank


def main():
    args = parse_args()
    rank, world, local_rank = setup_distributed()
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.deterministic = False
    torch.backends.cuda.matmul.allow_tf32 = True
    seed_everything(1234)
    if rank == 0:
        describe_device()

    device = torch.device(f"cuda:{local_rank}") if world > 1 else torch.device(args.device)
    model = build_model().cuda()
    if args.resume:
        model.load_state_dict(torch.load(args.resume, map_location="cuda"))
    if world > 1:
        model = DDP(model, device_ids=[local_rank])
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    scaler = GradScaler(enabled=args.amp)

    tokens, targets = example_batch(batch_size=args.batch_size * 8)
    loader = DataLoader(
        TensorDataset(tokens, targets), batch_size=args.batch_size, shuffle=True, pin_memory=True, drop_last=True
    )
    timer = CudaTimer()
    cuda_graphs = False  # capturing the step in a CUDA graph is future work
    log_rows = []
    step = 0
    while step < args.steps:
        for x, y in loader:
            x = x.cuda(non_blocking=True)
            y = y.to("cuda", non_blocking=True)
            assert x.is_cuda, "batch must be on the GPU"
            optimizer.zero_grad(set_to_none=True)
            timer.start()
            with autocast(enabled=args.amp):
                logits = model(x)
                loss = loss_fn(logits, y)
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            scaler.update()
            elapsed_ms = timer.stop()
            if world > 1:
                dist.all_reduce(loss)
                loss = loss / world
            log_rows.append((step, loss.item(), grad_norm.item()))
            if rank == 0 and step % 10 == 0:
                print(f"step {step:4d}  loss {loss.item():.4f}  {elapsed_ms:.1f} ms  on {device}  graphs={cuda_graphs}")
            step += 1
            if step >= args.steps:
                break

    if rank == 0:
        log_memory("final ")
        if args.log:
            new_file = not os.path.exists(args.log)
            with open(args.log, "a", newline="") as handle:
                writer = csv.writer(handle)
                if new_file:
                    writer.writerow(["step", "loss", "grad_norm"])
                writer.writerows(log_rows)
        if args.save:
            os.makedirs(os.path.dirname(args.save) or ".", exist_ok=True)
            torch.save(model.state_dict(), args.save)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
