"""``torchrun --nproc-per-node N -m transformer_lib.distributed --strategy {ddp,fsdp} --steps S
--global-batch B --seed K --save FILE``: chapter 16's GPT trained data-parallel on N processes.

Every rank draws the same global batch of B windows and trains on its B/N rows; rank 0 writes
the final full state dict (plain CPU tensors, ``torch.save``) to FILE and the per-step mean
training loss over the global batch, a JSON list, to ``FILE + ".losses.json"``. The result does
not depend on N (to float32 rounding). Several machines: the same command with torchrun's
``--nnodes 2 --node-rank R --rdzv-backend c10d --rdzv-endpoint HOST:PORT`` (see the README).

Without torchrun (no RANK in the environment) it runs as one process.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from .._checks import check_distributed_run, check_folder
from .data_parallel import train
from .launch import init_from_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m transformer_lib.distributed", description=__doc__.split("\n\n")[0])
    p.add_argument("--strategy", choices=("ddp", "fsdp", "hand"), required=True,
                   help="ddp: DistributedDataParallel; fsdp: FSDP2 fully_shard; hand: all-reduce written out")
    p.add_argument("--steps", type=int, required=True, help="optimizer steps")
    p.add_argument("--global-batch", type=int, required=True, help="windows per step over all ranks (N divides it)")
    p.add_argument("--seed", type=int, default=0, help="seeds the model's initialisation and the batches")
    p.add_argument("--save", type=Path, required=True, help="rank 0 writes the state dict here")
    return p


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    try:  # every argument checked before any process group exists: a clear error, not a hang
        check_distributed_run(args.strategy, args.steps, args.global_batch, world_size, args.seed)
        check_folder("save", args.save)
    except ValueError as err:
        parser.error(str(err))
    if "RANK" not in os.environ:  # one process, no torchrun: a group of one on the loopback
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    rank, world_size = init_from_env()
    try:
        result = train(rank, world_size, args.strategy, args.steps, args.global_batch, args.seed)
        if rank == 0:
            torch.save(result["state"], args.save)
            Path(f"{args.save}.losses.json").write_text(json.dumps(result["loss"]))
            print(f"{args.strategy} on {world_size} ranks: {args.steps} steps, loss {result['loss'][0]:.4f} -> "
                  f"{result['loss'][-1]:.4f}; saved {args.save}", flush=True)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
