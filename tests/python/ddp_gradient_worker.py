"""Run by torchrun from test_train_distributed.py: one data-parallel gradient of the tiny model (rank r gets
sentences [4r, 4r + 4) of the first eight), saved by rank 0."""

import os
import sys

import torch
from torch.nn.parallel import DistributedDataParallel

from mma_nmt.data import ParallelDataset, collate
from mma_nmt.models import build_model
from mma_nmt.training import distributed as dist
from mma_nmt.training.trainer import forward_backward

from nmt_fixtures import tiny_transformer


def main(data_dir: str, out: str) -> None:
    info = dist.init_distributed(torch.device("cpu"))
    torch.set_num_threads(1)
    data = ParallelDataset.load(data_dir, "train")
    config = tiny_transformer(src_vocab_size=data.src_tokenizer.vocab_size,
                              tgt_vocab_size=data.tgt_tokenizer.vocab_size)
    torch.manual_seed(0)
    model = build_model(config)
    ddp = DistributedDataParallel(model)
    batch = collate(data, list(range(4 * info.rank, 4 * info.rank + 4)))
    totals = forward_backward(ddp, batch, epsilon=0.1, pad_id=0, info=info)
    if info.is_main:
        torch.save({"totals": totals, "grads": {n: p.grad for n, p in model.named_parameters()}}, out)
    # Both ranks leave together, then skip gloo's teardown: destroying a gloo context right after a barrier races with
    # the peer's own teardown (pytorch/gloo#155, open). It aborted rank 1 twice in CI ("terminate called without an
    # active exception", SIGABRT), the second time with this barrier already before destroy_process_group. The
    # result is on disk before the barrier, and nothing after it is what this test checks.
    torch.distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
