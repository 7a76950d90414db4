"""Gold alignments, Och & Ney scores and arg-max extraction from attention; expected values worked out by hand."""

from __future__ import annotations

import pytest
import torch

from mma_nmt.analysis import (GoldAlignment, align_with_model, alignment_scores, diagonal_links, diagonal_scores,
                              links_from_attention, parse_talp_line, piece_to_word_attention, read_gold_alignments,
                              word_ids_from_pieces)
from nmt_fixtures import tiny_data  # noqa: F401 (a fixture)


def test_parse_talp_line_is_zero_based_and_possible_includes_sure():
    sure, possible = parse_talp_line("1-1 3p2 2-4\n")
    assert sure == {(0, 0), (1, 3)}
    assert possible == {(0, 0), (1, 3), (2, 1)}
    with pytest.raises(ValueError, match="bad alignment link"):
        parse_talp_line("1x2")
    with pytest.raises(ValueError, match="1-based"):
        parse_talp_line("0-1")


def test_gold_file_parses_to_the_documented_counts(shared_data):
    gold = read_gold_alignments(shared_data / "rwth_deen_alignment")
    assert len(gold) == 508
    assert sum(len(p.sure) for p in gold) == 9613
    assert sum(len(p.possible - p.sure) for p in gold) == 921
    first = gold[0]  # "9-8 8-8 7-8 6-6 1-1 2-2 4-5 5-5 3-3 11-9 10-7 2-4", all sure
    assert first.german[:3] == ["Wir", "glauben", "nicht"] and first.english[:2] == ["We", "do"]
    assert len(first.sure) == 12 and (8, 7) in first.sure and (1, 3) in first.sure and first.possible == first.sure


def test_oracle_attention_on_the_real_gold_set(shared_data):
    gold = read_gold_alignments(shared_data / "rwth_deen_alignment")

    def oracle(german, english):  # each English word attends to its first sure German word; unaligned words to none
        pair = next(p for p in gold if p.german == german and p.english == english)
        w = torch.zeros(1, len(english), len(german))
        for e in range(len(english)):
            linked = sorted(d for d, e2 in pair.sure if e2 == e)
            if linked:
                w[0, e, linked[0]] = 1.0
        return {"cross_attention": w}

    scores = align_with_model(oracle, gold)
    aligned_english = sum(len({e for _, e in p.sure}) for p in gold)  # |A|: one link per English word with a sure link
    assert scores.hypothesis_links == aligned_english and scores.precision == 1.0
    assert scores.recall == pytest.approx(aligned_english / 9613)
    assert scores.aer == pytest.approx(1 - 2 * aligned_english / (aligned_english + 9613))


def test_perfect_alignment_has_zero_aer():
    sure = [{(0, 0), (1, 1), (2, 2)}, {(0, 1)}]
    possible = [sure[0] | {(2, 3)}, {(0, 1), (1, 1)}]
    scores = alignment_scores([set(s) for s in sure], sure, possible)
    assert (scores.aer, scores.precision, scores.recall) == (0.0, 1.0, 1.0)


def test_known_imperfect_alignment():
    # S = {(0,0),(1,1),(2,2)}, P = S + {(2,3)}, A = {(0,0),(1,2),(2,3)}
    # |A| = 3, |S| = 3, |A & S| = 1, |A & P| = 2 -> precision 2/3, recall 1/3, AER = 1 - (1 + 2) / (3 + 3) = 0.5
    sure = {(0, 0), (1, 1), (2, 2)}
    scores = alignment_scores([{(0, 0), (1, 2), (2, 3)}], [sure], [sure | {(2, 3)}])
    assert scores.precision == pytest.approx(2 / 3)
    assert scores.recall == pytest.approx(1 / 3)
    assert scores.aer == pytest.approx(0.5)
    assert (scores.hypothesis_links, scores.sure_links, scores.hits_sure, scores.hits_possible) == (3, 3, 1, 2)


def test_scores_are_summed_over_the_corpus():
    # sentence 1: A = S = {(0,0)} ; sentence 2: A = {(0,0),(1,1),(2,2)}, S = P = {(0,1)} -> no hit
    # |A| = 4, |S| = 2, |A & S| = 1, |A & P| = 1 -> precision 1/4, recall 1/2, AER = 1 - 2/6 = 2/3
    scores = alignment_scores([{(0, 0)}, {(0, 0), (1, 1), (2, 2)}], [{(0, 0)}, {(0, 1)}], [{(0, 0)}, {(0, 1)}])
    assert (scores.precision, scores.recall) == (pytest.approx(0.25), pytest.approx(0.5))
    assert scores.aer == pytest.approx(2 / 3)


def test_scores_reject_possible_without_sure():
    with pytest.raises(ValueError, match="include the sure"):
        alignment_scores([set()], [{(0, 0)}], [{(1, 1)}])


def test_links_from_attention_take_the_argmax_source_of_each_target_row():
    w = torch.tensor([[0.1, 0.8, 0.1], [0.6, 0.3, 0.1], [0.0, 0.0, 0.0]])  # row 2 has no weight: no link
    assert links_from_attention(w) == {(1, 0), (0, 1)}


def test_word_ids_from_sentencepiece_pieces():
    pieces = ["\u2581Das", "\u2581st", "immt", "\u2581", "!", "</s>"]
    assert word_ids_from_pieces(pieces).tolist() == [0, 1, 1, 2, 2, -1]


PIECE_ATTENTION = torch.tensor([  # target pieces x source pieces ("▁Das", "▁st", "immt", "</s>")
    [0.7, 0.1, 0.1, 0.1],  # ▁That -> words [0.7, 0.2]
    [0.1, 0.3, 0.4, 0.2],  # ▁is   -> [0.1, 0.7]
    [0.5, 0.2, 0.2, 0.1],  # ▁ri   -> [0.5, 0.4]
    [0.1, 0.2, 0.2, 0.5],  # ght   -> [0.1, 0.4]; the word "right" averages ▁ri and ght: [0.3, 0.4]
    [0.25, 0.25, 0.25, 0.25],  # </s> dropped
])
SOURCE_IDS = torch.tensor([0, 1, 1, -1])
TARGET_IDS = torch.tensor([0, 1, 2, 2, -1])


def test_subword_pieces_sum_on_the_source_and_average_on_the_target():
    words = piece_to_word_attention(PIECE_ATTENTION, source_word_ids=SOURCE_IDS, target_word_ids=TARGET_IDS)
    torch.testing.assert_close(words, torch.tensor([[0.7, 0.2], [0.1, 0.7], [0.3, 0.4]]))
    assert links_from_attention(words) == {(0, 0), (1, 1), (1, 2)}


def test_align_with_model_uses_the_chosen_layer_and_scores_against_gold():
    gold = [GoldAlignment(german=["Das", "stimmt"], english=["That", "is", "right"], sure={(0, 0), (1, 1)},
                          possible={(0, 0), (1, 1), (1, 2)})]
    to_first_word = torch.tensor([[1.0, 0, 0, 0]]).expand(5, 4)  # every target piece -> "Das"
    layers = torch.stack([to_first_word, PIECE_ATTENTION, to_first_word])  # (L=3, T=5, S=4)
    layers = layers.unsqueeze(1).expand(3, 2, 5, 4)  # (L, H=2, T, S): both heads alike
    calls = []

    def attention_fn(source, target):
        calls.append((source, target))
        return {"cross_attention": layers, "source_word_ids": SOURCE_IDS, "target_word_ids": TARGET_IDS}

    # penultimate layer: links (0,0), (1,1), (1,2) -> |A| = 3, |S| = 2, |A&S| = 2, |A&P| = 3 -> AER 0
    best = align_with_model(attention_fn, gold)
    assert calls == [(["Das", "stimmt"], ["That", "is", "right"])]
    assert (best.aer, best.precision, best.recall) == (0.0, 1.0, 1.0)
    # layer 0: links (0,0), (0,1), (0,2) -> |A&S| = 1, |A&P| = 1 -> P = 1/3, R = 1/2, AER = 1 - 2/5
    worst = align_with_model(attention_fn, gold, layer=0)
    assert (worst.precision, worst.recall, worst.aer) == (pytest.approx(1 / 3), 0.5, pytest.approx(0.6))


def test_align_with_model_english_source_swaps_links_back_to_german_english():
    gold = [GoldAlignment(german=["Das", "stimmt"], english=["That", "is", "right"], sure={(0, 0), (1, 1)},
                          possible={(0, 0), (1, 1), (1, 2)})]
    cross = torch.tensor([[0.9, 0.05, 0.05], [0.1, 0.2, 0.7]]).unsqueeze(0)  # (H=1, T=2 German, S=3 English)
    # links (en, de) = (0, 0), (2, 1) -> (de, en) = (0, 0), (1, 2): |A| 2, |A&S| 1, |A&P| 2 -> AER = 1 - 3/4
    scores = align_with_model(lambda s, t: {"cross_attention": cross}, gold, source_language="en")
    assert scores.per_sentence == [{(0, 0), (1, 2)}]
    assert (scores.precision, scores.recall, scores.aer) == (1.0, 0.5, pytest.approx(0.25))


def test_align_with_model_rejects_attention_that_does_not_cover_the_words():
    gold = [GoldAlignment(german=["a", "b"], english=["c"], sure=set(), possible=set())]
    with pytest.raises(ValueError, match="target words, source words"):
        align_with_model(lambda s, t: {"cross_attention": torch.ones(1, 3, 3)}, gold)


def test_diagonal_links_take_the_german_word_under_each_english_word_centre():
    assert diagonal_links(3, 3) == {(0, 0), (1, 1), (2, 2)}
    assert diagonal_links(2, 4) == {(0, 0), (0, 1), (1, 2), (1, 3)}  # centres 0.25, 0.75, 1.25, 1.75 German words
    assert diagonal_links(5, 2) == {(1, 0), (3, 1)}  # centres 1.25 and 3.75
    assert diagonal_links(1, 3) == {(0, 0), (0, 1), (0, 2)}
    with pytest.raises(ValueError, match="need a word"):
        diagonal_links(0, 3)


def test_diagonal_scores_link_every_target_word_in_the_models_direction():
    gold = [GoldAlignment(german=["a", "b", "c", "d"], english=["w", "x"], sure={(0, 0), (3, 1)},
                          possible={(0, 0), (3, 1), (1, 0)})]
    english_source = diagonal_scores(gold, source_language="en")  # one link per German (target) word
    assert english_source.per_sentence == [{(0, 0), (1, 0), (2, 1), (3, 1)}]
    assert (english_source.hits_sure, english_source.hits_possible) == (2, 3)
    german_source = diagonal_scores(gold)  # one link per English (target) word
    assert german_source.per_sentence == [{(1, 0), (3, 1)}]
    with pytest.raises(ValueError, match="source_language"):
        diagonal_scores(gold, source_language="fr")


def _known_attention(gold_pairs, src_tokenizer, tgt_tokenizer, layers=3, layer=1):
    """An attention_fn over real SentencePiece pieces whose alignment is known: each German (target) word with a sure
    link attends to the first English word it is linked to. Only the mean of two heads, on layer ``layer``, with the
    source pieces of a word summed, finds it: the aligned word's mass is spread over its pieces while one piece of a
    distractor word gets more than any of them, and head 1 alone prefers the distractor. Other layers attend to the
    distractor only; the EOS row too. Returns the function and the expected (German, English) links per pair."""
    from mma_nmt.evaluation.force_decode import encode_words

    by_words = {(tuple(p.english), tuple(p.german)): p for p in gold_pairs}
    expected = []
    for pair in gold_pairs:
        first = {g: min(e for g2, e in pair.sure if g2 == g) for g, _ in pair.sure}
        expected.append({(g, e) for g, e in first.items()})

    def attention(source, target):
        pair = by_words[tuple(source), tuple(target)]
        first = {g: min(e for g2, e in pair.sure if g2 == g) for g, _ in pair.sure}
        src_ids, src_words = encode_words(src_tokenizer, source)
        tgt_ids, tgt_words = encode_words(tgt_tokenizer, target)
        src_words, tgt_words = torch.tensor(src_words), torch.tensor(tgt_words + [-1])
        weights = torch.zeros(layers, 2, len(tgt_ids) + 1, len(src_ids))
        for row, word in enumerate(tgt_words.tolist()):
            aligned = first.get(word)
            distractor = (aligned + 1) % len(source) if aligned is not None else 0
            weights[:, :, row, (src_words == distractor).nonzero()[0]] = 1.0  # every layer and head: the distractor
            if aligned is None or word < 0:
                if word >= 0:
                    weights[layer, :, row] = 0.0  # an unaligned German word: no weight, no link
                continue
            mine = (src_words == aligned).nonzero().flatten()
            spot = (src_words == distractor).nonzero()[0]
            weights[layer, :, row] = 0.0
            weights[layer, 0, row, mine] = 0.5 / len(mine)  # head 0: 0.5 on the word, spread over its pieces
            weights[layer, 0, row, spot] = 0.3  # ... 0.3 on one distractor piece
            weights[layer, 1, row, mine] = 0.3 / len(mine)  # head 1 alone prefers the distractor
            weights[layer, 1, row, spot] = 0.4
        return {"cross_attention": weights, "source_word_ids": src_words, "target_word_ids": tgt_words}

    return attention, expected


def test_extraction_recovers_a_known_alignment_through_real_subwords(shared_data, tiny_data):
    """The whole extraction on the real RWTH gold file (1-based links read from disk) and real SentencePiece pieces,
    English source as the GMM analysis runs it: the known links come back exactly, only from the chosen layer, only
    with the heads averaged and the source pieces summed into words, swapped back to (German, English)."""
    from mma_nmt.data import ParallelDataset

    gold = read_gold_alignments(shared_data / "rwth_deen_alignment")[:25]
    data = ParallelDataset.load(tiny_data, "valid")
    attention, expected = _known_attention(gold, data.tgt_tokenizer, data.src_tokenizer)
    split = sum(len(data.tgt_tokenizer.encode(word)) > 1 for pair in gold for word in pair.english)
    assert split > 100  # Europarl words in a 320-piece vocabulary: most are several pieces
    scores = align_with_model(attention, gold, source_language="en", layer=1)
    assert scores.per_sentence == expected
    assert scores.precision == 1.0 and scores.hits_sure == sum(len(links) for links in expected)
    wrong_layer = align_with_model(attention, gold, source_language="en", layer=0)
    assert wrong_layer.hits_sure < scores.hits_sure / 2


def test_a_models_attention_rows_line_up_with_the_words_they_predict(shared_data, tiny_data):
    """The model side of the extraction (alignment_attention_fn): one column per source piece of the gold words (no
    special token), one row per target piece plus the EOS row (word id -1), every row a distribution; row t is the
    one that predicts target piece t, so it reads only the target pieces before t: changing the last German word
    leaves every row up to its first piece as it was."""
    from mma_nmt.data import ParallelDataset
    from mma_nmt.evaluation.force_decode import alignment_attention_fn, encode_words
    from mma_nmt.models import build_model
    from nmt_fixtures import tiny_transformer

    data = ParallelDataset.load(tiny_data, "valid")
    src_tok, tgt_tok = data.tgt_tokenizer, data.src_tokenizer  # English source, German target, as the GMM analysis
    torch.manual_seed(0)
    config = tiny_transformer(src_vocab_size=src_tok.vocab_size, tgt_vocab_size=tgt_tok.vocab_size)
    config.decoder.layers = 2
    model = build_model(config)
    attention = alignment_attention_fn(model, src_tok, tgt_tok)
    pair = read_gold_alignments(shared_data / "rwth_deen_alignment")[0]
    out = attention(pair.english, pair.german)
    src_ids, src_words = encode_words(src_tok, pair.english)
    tgt_ids, tgt_words = encode_words(tgt_tok, pair.german)
    cross = out["cross_attention"]
    assert cross.shape[2:] == (len(tgt_ids) + 1, len(src_ids)) and cross.shape[0] == 2
    torch.testing.assert_close(cross.sum(-1), torch.ones(cross.shape[:-1]))
    assert out["source_word_ids"].tolist() == src_words
    assert out["target_word_ids"].tolist() == tgt_words + [-1]
    changed = attention(pair.english, pair.german[:-1] + ["Haus"])["cross_attention"]
    last = tgt_words.index(len(pair.german) - 1)  # the first piece of the last word
    torch.testing.assert_close(changed[:, :, :last + 1], cross[:, :, :last + 1])
    assert not torch.allclose(changed[:, :, last + 1], cross[:, :, last + 1])  # the next row reads the new word
    scores = align_with_model(attention, [pair], source_language="en", layer=-1)
    assert scores.hypothesis_links == len(pair.german)  # one link per German word
