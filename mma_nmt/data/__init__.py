"""Data pipeline: known corpora, robust reading, SentencePiece preparation, binarised datasets and token batching.

See ``docs/data.md``. Typical use::

    from mma_nmt.data import PrepareConfig, prepare, ParallelDataset, TokenBatchSampler, make_loader
    out = prepare(PrepareConfig(corpus="multi30k_de_en", out_dir="runs/data/multi30k_de_en", vocab_size=8000))
    train = ParallelDataset.load(out, "train")
    sampler = train.batch_sampler(max_tokens=4096, seed=1)
    for batch in make_loader(train, sampler): ...
"""

from mma_nmt.data.batch import Batch, Collater, collate
from mma_nmt.data.corpora import CORPORA, CorpusSpec, default_data_dir, get_corpus
from mma_nmt.data.dataset import ParallelDataset, make_loader
from mma_nmt.data.download import DownloadError, RemoteFile, download
from mma_nmt.data.prepare import PrepareConfig, pipeline_for, prepare
from mma_nmt.data.preprocess import TextPipeline
from mma_nmt.data.reader import DataFormatError, ParallelText, ReadReport, read_parallel
from mma_nmt.data.sampler import TokenBatchSampler
from mma_nmt.data.tokenizer import Tokenizer

__all__ = [
    "Batch", "Collater", "collate", "CORPORA", "CorpusSpec", "default_data_dir", "get_corpus", "ParallelDataset",
    "make_loader", "DownloadError", "RemoteFile", "download", "PrepareConfig", "pipeline_for", "prepare",
    "TextPipeline", "DataFormatError", "ParallelText", "ReadReport", "read_parallel", "TokenBatchSampler", "Tokenizer",
]
