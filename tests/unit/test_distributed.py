"""Data-parallel setup: a single process is plain, and two gloo processes really average gradients."""

import os
import socket

import torch
import torch.multiprocessing as mp
from torch import nn

from robocoach_skills.distributed import setup_distributed, unwrap


def test_single_process_context_is_a_no_op(monkeypatch):
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ROBOCOACH_DEVICE", "cpu")
    ctx = setup_distributed()
    model = nn.Linear(2, 1)
    assert ctx.is_main and not ctx.distributed
    assert ctx.wrap(model) is model and ctx.sampler(list(range(4)), shuffle=True) is None
    assert ctx.mean(3.0) == 3.0


def _worker(rank: int, port: int, results) -> None:
    os.environ.update(
        {"WORLD_SIZE": "2", "RANK": str(rank), "LOCAL_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
         "MASTER_PORT": str(port), "ROBOCOACH_DEVICE": "cpu"}
    )  # fmt: skip
    torch.set_num_threads(1)
    ctx = setup_distributed()
    torch.manual_seed(0)
    model = ctx.wrap(nn.Linear(1, 1, bias=False))
    x = torch.tensor([[float(rank + 1)]])  # rank 0 sees 1, rank 1 sees 2
    model(x).sum().backward()
    results[rank] = (
        unwrap(model).weight.grad.item(),
        ctx.mean(float(rank)),
        len(ctx.sampler(range(10), True)),
    )
    ctx.close()


def test_two_gloo_processes_average_gradients():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    results = mp.Manager().dict()
    mp.spawn(_worker, args=(port, results), nprocs=2, join=True)
    # d(w*x)/dw = x; DDP averages over ranks: (1 + 2) / 2
    assert results[0][0] == results[1][0] == 1.5
    assert results[0][1] == results[1][1] == 0.5
    assert results[0][2] == results[1][2] == 5
