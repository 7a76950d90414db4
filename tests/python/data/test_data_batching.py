"""TokenBatchSampler and collate: token budget, determinism by seed, exact resumption, sharding, padding layout."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from mma_nmt.data.batch import collate
from mma_nmt.data.dataset import ParallelDataset, TokenBatchSampler, make_loader


def lengths(n: int = 2000, seed: int = 0, high: int = 60) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(1, high, n), rng.integers(1, high, n)


def cost(batch, src, tgt) -> int:
    return len(batch) * max(max(src[i], tgt[i]) + 2 for i in batch)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 50)), min_size=1, max_size=200),
       st.integers(52, 600), st.booleans(), st.integers(0, 3))
def test_batches_fit_max_tokens_and_cover_each_example_once(pairs, max_tokens, shuffle, seed):
    src, tgt = zip(*pairs)
    sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, shuffle=shuffle, seed=seed)
    batches = list(sampler)
    assert all(cost(b, src, tgt) <= max_tokens for b in batches)
    assert sorted(i for b in batches for i in b) == list(range(len(pairs)))
    assert len(batches) == len(sampler)


def test_batches_are_length_bucketed():
    src, tgt = lengths()
    batches = list(TokenBatchSampler(src, tgt, max_tokens=2048, seed=0))
    longest = np.maximum(src, tgt)
    spread = [int(longest[b].max() - longest[b].min()) for b in batches]
    assert np.mean(spread) <= 2  # sorted by length, so a batch holds nearly equal lengths


def test_same_seed_same_batches_other_seed_or_epoch_differs():
    src, tgt = lengths()
    first = list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=7))
    assert first == list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=7))
    assert first != list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=8))
    sampler = TokenBatchSampler(src, tgt, max_tokens=1024, seed=7)
    sampler.set_epoch(1)
    assert list(sampler) != first


def test_finishing_an_epoch_moves_to_the_next():
    src, tgt = lengths(300)
    sampler = TokenBatchSampler(src, tgt, max_tokens=512, seed=1)
    epoch0 = list(sampler)
    assert sampler.epoch == 1
    epoch1 = list(sampler)
    reference = TokenBatchSampler(src, tgt, max_tokens=512, seed=1)
    reference.set_epoch(1)
    assert epoch1 == list(reference) and epoch1 != epoch0


def test_state_dict_resumes_mid_epoch_at_the_same_batch():
    src, tgt = lengths()
    sampler = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3)
    sampler.set_epoch(2)
    reference = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3)
    reference.set_epoch(2)
    full = list(reference)
    iterator = iter(sampler)
    head = [next(iterator) for _ in range(10)]
    state = sampler.state_dict()
    assert state["epoch"] == 2 and state["position"] == 10
    resumed = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # a training loop calling set_epoch again must not restart the epoch
    assert head + list(resumed) == full
    assert resumed.epoch == 3 and resumed.state_dict()["position"] == 0


def test_state_dict_with_batches_consumed_and_mismatched_settings():
    src, tgt = lengths(500)
    sampler = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3)
    batches = list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=3))
    state = sampler.state_dict(batches_consumed=4)
    resumed = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3)
    resumed.load_state_dict(state)
    assert list(resumed) == batches[4:]
    other = TokenBatchSampler(src, tgt, max_tokens=2048, seed=3)
    with pytest.raises(ValueError, match="max_tokens: saved 1024 vs now 2048"):
        other.load_state_dict(state)


def test_max_len_filters_and_oversized_examples_raise():
    src, tgt = [3, 10, 200, 5], [4, 300, 2, 5]
    sampler = TokenBatchSampler(src, tgt, max_tokens=100, max_len=50, shuffle=False)
    assert sampler.num_filtered == 2
    assert sorted(i for b in sampler for i in b) == [0, 3]
    with pytest.raises(ValueError, match="example 1 needs 302"):
        TokenBatchSampler(src, tgt, max_tokens=100)


def test_replicas_get_disjoint_equal_shares():
    src, tgt = lengths(999)
    shards = [list(TokenBatchSampler(src, tgt, max_tokens=700, seed=5, num_replicas=3, rank=r)) for r in range(3)]
    assert len({len(s) for s in shards}) == 1
    seen = [i for shard in shards for b in shard for i in b]
    assert set(seen) == set(range(999))


class TinyDataset:
    def __init__(self):
        self.src = [torch.tensor([5, 6, 7]), torch.tensor([8])]
        self.tgt = [torch.tensor([9]), torch.tensor([10, 11, 12, 13])]


def test_collate_pads_and_adds_bos_eos_to_target():
    batch = collate(TinyDataset(), [1, 0])
    assert batch.src.tolist() == [[8, 0, 0], [5, 6, 7]]
    assert batch.src_lengths.tolist() == [1, 3]
    assert batch.tgt_in.tolist() == [[1, 10, 11, 12, 13], [1, 9, 0, 0, 0]]
    assert batch.tgt_out.tolist() == [[10, 11, 12, 13, 2], [9, 2, 0, 0, 0]]
    assert batch.tgt_lengths.tolist() == [5, 2] and batch.indices.tolist() == [1, 0]
    assert batch.num_tokens == 7 and len(batch) == 2
    assert all(t.dtype == torch.int64 for t in (batch.src, batch.tgt_in, batch.tgt_out, batch.src_lengths))
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_out, batch.tgt_out)
    with pytest.raises(ValueError, match="empty"):
        collate(TinyDataset(), [])


def test_moving_a_batch_can_leave_named_fields_on_the_host():
    batch = collate(TinyDataset(), [1, 0])
    moved = batch.to("meta", keep_on_host=("src_lengths",))
    assert moved.src_lengths is batch.src_lengths
    assert all(t.device.type == "meta" for t in (moved.src, moved.tgt_in, moved.tgt_out, moved.tgt_lengths))
    with pytest.raises(ValueError, match=r"no field of a Batch: \['src_length'\]"):
        batch.to("meta", keep_on_host=("src_length",))


def random_dataset(pairs: int, longest: int, seed: int) -> ParallelDataset:
    """``pairs`` random sentence pairs of 1 to ``longest - 1`` tokens a side, without tokenizers."""
    rng = np.random.default_rng(seed)
    src = [torch.tensor(rng.integers(4, 50, n)) for n in rng.integers(1, longest, pairs)]
    tgt = [torch.tensor(rng.integers(4, 50, n)) for n in rng.integers(1, longest, pairs)]
    return ParallelDataset(src, tgt, src_text=[""] * pairs, tgt_text=[""] * pairs, src_tokenizer=None,
                           tgt_tokenizer=None)


def test_loader_over_a_dataset_yields_batches_in_sampler_order():
    dataset = random_dataset(64, 20, seed=0)
    sampler = dataset.batch_sampler(max_tokens=100, seed=2)
    expected = list(TokenBatchSampler(dataset.src_lengths, dataset.tgt_lengths, max_tokens=100, seed=2))
    got = [batch.indices.tolist() for batch in make_loader(dataset, sampler)]
    assert got == expected


# ---- train.length_multiple: widths rounded up, so that an epoch has few distinct batch shapes --------------------
def round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 50), st.integers(1, 50)), min_size=1, max_size=200),
       st.integers(64, 600), st.sampled_from([2, 8, 16]), st.integers(0, 3))
def test_rounded_batches_fit_max_tokens_as_collated_and_cover_each_example_once(pairs, max_tokens, multiple, seed):
    src, tgt = zip(*pairs)
    sampler = TokenBatchSampler(src, tgt, max_tokens=max_tokens, seed=seed, length_multiple=multiple)
    batches = list(sampler)
    for b in batches:  # the widths collate gives them: the source, the target with BOS (or EOS), rounded up
        widths = round_up(max(src[i] for i in b), multiple), round_up(max(tgt[i] for i in b) + 1, multiple)
        assert len(b) * max(widths) <= max_tokens
    assert sorted(i for b in batches for i in b) == list(range(len(pairs)))


def test_a_multiple_of_one_keeps_the_batches_of_earlier_runs():
    src, tgt = lengths()
    batches = list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=3, length_multiple=1))
    assert batches == list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=3))
    assert all(cost(b, src, tgt) <= 1024 for b in batches)
    assert max(cost(b, src, tgt) for b in batches) > 1000  # the historical cost, max(src, tgt) + 2, fills them


def test_an_example_too_wide_once_rounded_up_says_so():
    with pytest.raises(ValueError, match=r"example 0 needs 16, its widths rounded up to length_multiple=8\); raise"):
        TokenBatchSampler([9], [3], max_tokens=12, length_multiple=8)  # fits unrounded: 9 + 2 = 11
    assert len(TokenBatchSampler([9], [3], max_tokens=12)) == 1


def test_a_length_multiple_below_one_is_refused():
    with pytest.raises(ValueError, match="length_multiple must be at least 1, got 0"):
        TokenBatchSampler([3], [4], max_tokens=100, length_multiple=0)
    with pytest.raises(ValueError, match="length_multiple must be at least 1, got 0"):
        collate(TinyDataset(), [0], length_multiple=0)


def test_resuming_needs_the_same_length_multiple_and_older_states_meant_one():
    src, tgt = lengths(500)
    state = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3, length_multiple=8).state_dict(batches_consumed=2)
    with pytest.raises(ValueError, match="length_multiple: saved 8 vs now 1"):
        TokenBatchSampler(src, tgt, max_tokens=1024, seed=3).load_state_dict(state)
    older = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3).state_dict(batches_consumed=2)
    del older["length_multiple"]  # a checkpoint written before the setting existed
    resumed = TokenBatchSampler(src, tgt, max_tokens=1024, seed=3)
    resumed.load_state_dict(older)
    assert list(resumed) == list(TokenBatchSampler(src, tgt, max_tokens=1024, seed=3))[2:]
    with pytest.raises(ValueError, match="length_multiple: saved 1 vs now 8"):
        TokenBatchSampler(src, tgt, max_tokens=1024, seed=3, length_multiple=8).load_state_dict(older)


def test_collate_pads_widths_up_to_the_multiple_and_keeps_lengths():
    batch = collate(TinyDataset(), [1, 0], length_multiple=4)
    assert batch.src.tolist() == [[8, 0, 0, 0], [5, 6, 7, 0]]
    assert batch.tgt_in.tolist() == [[1, 10, 11, 12, 13, 0, 0, 0], [1, 9, 0, 0, 0, 0, 0, 0]]
    assert batch.tgt_out.tolist() == [[10, 11, 12, 13, 2, 0, 0, 0], [9, 2, 0, 0, 0, 0, 0, 0]]
    assert batch.src_lengths.tolist() == [1, 3] and batch.tgt_lengths.tolist() == [5, 2] and batch.num_tokens == 7
    exact = collate(TinyDataset(), [0], length_multiple=3)  # widths already multiples: nothing added
    assert exact.src.shape == (1, 3) and exact.tgt_in.shape == (1, 3)


def test_epoch_shapes_count_the_collated_batches_without_moving_the_sampler():
    from collections import Counter

    from mma_nmt.data.batch_shapes import epoch_shapes

    dataset = random_dataset(300, 40, seed=1)
    distinct = {}
    for multiple in (1, 8):
        sampler = dataset.batch_sampler(max_tokens=400, seed=2, length_multiple=multiple)
        counted = epoch_shapes(sampler, dataset.src_lengths, dataset.tgt_lengths)
        assert sampler.state_dict()["position"] == 0 and sampler.epoch == 0
        batches = list(make_loader(dataset, sampler))
        assert counted.shapes == Counter((len(b), b.src.shape[1], b.tgt_in.shape[1]) for b in batches)
        positions = sum(b.src.numel() + b.tgt_in.numel() for b in batches)
        real = sum(int(b.src_lengths.sum() + b.tgt_lengths.sum()) for b in batches)
        assert counted.padding == pytest.approx(1 - real / positions)
        assert counted.batches == len(batches)
        distinct[multiple] = counted.distinct
    assert distinct[8] < distinct[1] / 2
