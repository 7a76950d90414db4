"""Token-budget batching with length bucketing, deterministic shuffling and exact mid-epoch resumption."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np


def round_up(lengths, multiple: int):
    """``lengths`` (an int or an integer array) rounded up to multiples of ``multiple``."""
    if multiple < 1:
        raise ValueError(f"length_multiple must be at least 1, got {multiple}")
    return -(-lengths // multiple) * multiple


class TokenBatchSampler:
    """Yields lists of example indices whose padded size fits a token budget.

    The cost of a batch is ``len(batch) * max_i(size_i)``: every sentence padded to the longest one. An example's size
    is ``max(src, tgt) + 2`` (room for BOS and EOS), or with ``length_multiple = m > 1`` the widest row it can give
    once ``collate(..., length_multiple=m)`` rounds the widths up, ``max(round_up(src, m), round_up(tgt + 1, m))``.
    Each epoch the kept examples are put in a random order (``seed``, ``epoch``), stably sorted by ``max(src, tgt)``
    (so equal lengths stay in random order), cut greedily into batches of cost at most ``max_tokens`` (and at most
    ``max_sentences`` sentences), and the batches are shuffled. Without ``shuffle`` the order is by length, then
    index. With ``num_replicas > 1`` rank ``r`` gets batches ``r, r + R, ...``; the batch list is padded by repeating
    its first batches so that every rank gets the same number.

    Shapes: with ``length_multiple = m > 1`` the examples of one rounded size fill batches of one sentence count, so
    an epoch has far fewer distinct (B, S, T) shapes, at the cost of more padding. Each shape records its own CUDA
    graphs under ``torch.compile(mode="reduce-overhead")``; :func:`mma_nmt.data.batch_shapes.epoch_shapes` counts
    them.

    Epochs: :meth:`set_epoch` selects the epoch (and restarts it only if it differs from the current one); finishing an
    iteration moves on to the next epoch as if ``set_epoch(epoch + 1)`` had been called.

    Resumption: :meth:`state_dict` records the epoch and how many batches of it were yielded; after
    :meth:`load_state_dict` the next iteration continues with the following batch. A ``DataLoader`` with workers
    draws batches ahead of the training loop; pass the number of batches the loop consumed as
    ``state_dict(batches_consumed=n)`` in that case.

    Args:
        src_lengths, tgt_lengths: per-example lengths without specials.
        max_tokens: the token budget of one batch; an example that alone exceeds it raises ValueError.
        shuffle, seed: random order (deterministic given ``seed`` and the epoch).
        max_len: examples with ``max(src, tgt) > max_len`` are left out (``num_filtered`` counts them).
        num_replicas, rank: data-parallel sharding.
        max_sentences: optional cap on the number of sentences per batch.
        length_multiple: round each example's size, and so each batch's widths, up to a multiple of this.
    """

    def __init__(self, src_lengths: Sequence[int], tgt_lengths: Sequence[int], *, max_tokens: int,
                 shuffle: bool = True, seed: int = 0, max_len: int | None = None, num_replicas: int = 1,
                 rank: int = 0, max_sentences: int | None = None, length_multiple: int = 1):
        src = np.asarray(src_lengths, dtype=np.int64).reshape(-1)
        tgt = np.asarray(tgt_lengths, dtype=np.int64).reshape(-1)
        if src.shape != tgt.shape:
            raise ValueError(f"src_lengths has {src.size} entries but tgt_lengths has {tgt.size}")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}")
        round_up(0, length_multiple)  # refuses a multiple below 1
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank must be in [0, num_replicas={num_replicas}), got {rank}")
        self.max_tokens, self.shuffle, self.seed = int(max_tokens), bool(shuffle), int(seed)
        self.max_len, self.max_sentences = max_len, max_sentences
        self.num_replicas, self.rank = int(num_replicas), int(rank)
        self.length_multiple = int(length_multiple)
        longest = np.maximum(src, tgt)
        self._sizes = longest + 2 if self.length_multiple == 1 else np.maximum(
            round_up(src, self.length_multiple), round_up(tgt + 1, self.length_multiple))  # (N,)
        self._kept = np.arange(src.size) if max_len is None else np.flatnonzero(longest <= max_len)
        self.num_examples = int(src.size)
        self.num_filtered = self.num_examples - int(self._kept.size)
        too_big = self._kept[self._sizes[self._kept] > self.max_tokens]
        if too_big.size:
            raise ValueError(
                f"{too_big.size} examples need more than max_tokens={self.max_tokens} on their own (example "
                f"{int(too_big[0])} needs {int(self._sizes[too_big[0]])}"
                + (f", its widths rounded up to length_multiple={self.length_multiple}" if self.length_multiple > 1
                   else "") + "); raise max_tokens or set max_len")
        self.epoch = 0
        self._position = 0
        self._cache: tuple[int, list[list[int]]] | None = None

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch whose order is produced next; a different epoch restarts from its first batch."""
        if int(epoch) != self.epoch:
            self.epoch = int(epoch)
            self._position = 0

    def _all_batches(self, epoch: int) -> list[list[int]]:
        """Every replica's batches of ``epoch``, in the order they are handed out."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self._kept) if self.shuffle else self._kept
        order = order[np.argsort(self._sizes[order], kind="stable")]
        batches = self._chunk(order)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        if self.num_replicas > 1 and batches:
            short = -len(batches) % self.num_replicas
            batches = batches + [batches[i % len(batches)] for i in range(short)]
        return batches

    def _chunk(self, order: np.ndarray) -> list[list[int]]:
        """Greedy cut of length-sorted ``order`` into batches within the token and sentence budgets."""
        batches: list[list[int]] = []
        current: list[int] = []
        widest = 0
        cap = self.max_sentences or len(order) + 1
        for index, size in zip(order.tolist(), self._sizes[order].tolist()):
            new_widest = max(widest, size)
            if current and (new_widest * (len(current) + 1) > self.max_tokens or len(current) >= cap):
                batches.append(current)
                current, new_widest = [], size
            current.append(index)
            widest = new_widest
        if current:
            batches.append(current)
        return batches

    def epoch_batches(self, epoch: int) -> list[list[int]]:
        """This rank's batches of ``epoch``, in order, without moving the sampler's position."""
        if epoch == self.epoch:
            return [list(batch) for batch in self._batches()]
        return self._all_batches(epoch)[self.rank::self.num_replicas]

    def _batches(self) -> list[list[int]]:
        """This rank's batches of the current epoch (cached)."""
        if self._cache is None or self._cache[0] != self.epoch:
            self._cache = (self.epoch, self._all_batches(self.epoch)[self.rank::self.num_replicas])
        return self._cache[1]

    def __len__(self) -> int:
        """Batches per epoch for this rank (the same for every epoch)."""
        return len(self._batches())

    def __iter__(self) -> Iterator[list[int]]:
        batches = self._batches()
        while self._position < len(batches):
            batch = batches[self._position]
            self._position += 1
            yield list(batch)
        self.set_epoch(self.epoch + 1)

    def state_dict(self, *, batches_consumed: int | None = None) -> dict:
        """Position in the epoch: the batches yielded so far, or ``batches_consumed`` when given (see class doc)."""
        position = self._position if batches_consumed is None else int(batches_consumed)
        return {"epoch": self.epoch, "position": position, "seed": self.seed, "shuffle": self.shuffle,
                "max_tokens": self.max_tokens, "num_examples": self.num_examples, "max_len": self.max_len,
                "max_sentences": self.max_sentences, "num_replicas": self.num_replicas, "rank": self.rank,
                "length_multiple": self.length_multiple}

    def load_state_dict(self, state: dict) -> None:
        """Restores the epoch and position; the settings that fix the batch order must equal this sampler's."""
        mine = self.state_dict()
        state = {"length_multiple": 1, **state}  # saved before length_multiple existed: every batch was unrounded
        fixed = ("seed", "shuffle", "max_tokens", "num_examples", "max_len", "max_sentences", "num_replicas", "rank",
                 "length_multiple")
        different = {key: (state.get(key), mine[key]) for key in fixed if state.get(key) != mine[key]}
        if different:
            detail = ", ".join(f"{key}: saved {saved!r} vs now {now!r}" for key, (saved, now) in different.items())
            raise ValueError(f"cannot resume: the sampler settings changed ({detail}), so batches would differ")
        self.epoch = int(state["epoch"])
        self._cache = None
        position = int(state["position"])
        if not 0 <= position <= len(self):
            raise ValueError(f"saved position {position} is outside this epoch's {len(self)} batches")
        self._position = position
