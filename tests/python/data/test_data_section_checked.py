"""``[data]`` is read like every other section and checked against the prepared folder (issue 50, case 3): a misspelt
key or a bad value is an error naming ``data.<key>``, and a setting that differs from the one the folder was prepared
with is refused instead of training on the old data."""

from __future__ import annotations

import pytest

from mma_nmt import pipeline
from mma_nmt.training.config import load_run_config
from nmt_fixtures import tiny_data, tiny_overrides  # noqa: F401  (fixture)


@pytest.mark.parametrize("override, named", [("data.vocab_sise=500", "vocab_sise"),
                                             ("data.vocab_size=3", "data.vocab_size"),
                                             ("data.vocab_size=many", "data.vocab_size"),
                                             ("data.model_type=wordpiece", "data.model_type"),
                                             ("data.corpus=wmt99", "data.corpus")])
def test_a_bad_data_key_or_value_is_refused_when_the_config_is_read(override, named):
    with pytest.raises(ValueError, match=named):
        load_run_config(None, [override])


def test_a_data_setting_other_than_the_prepared_folders_is_refused(tiny_data, tmp_path):  # noqa: F811
    save_dir = tmp_path / "run"
    run = load_run_config(None, tiny_overrides(tiny_data, save_dir, "train.max_steps=1", "data.vocab_size=500"))
    with pytest.raises(ValueError, match=rf"^{tiny_data} was prepared with other \[data\] settings \(data.vocab_size is "
                                         rf"500 in the run config but 320 in its meta.json\).*another data.out_dir"):
        pipeline.train(run)
    assert not save_dir.exists()  # refused before training

    same = load_run_config(None, tiny_overrides(tiny_data, save_dir, "data.vocab_size=320", "data.max_train_lines=50",
                                                "data.workers=1", "data.splits=[\"valid\", \"train\"]"))
    pipeline.ensure_prepared(same)  # the settings it was prepared with (and place/speed ones that may differ) pass
