"""The family-relative batch feature of Gavel's solo features comes from solo runs only."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from bayes_sched.interference.gavel import (
    BATCH_FEATURES,
    GAVEL_DIR,
    family_of,
    load_gavel_solo_features,
)

HELD_OUT = "Recommendation"


def _copy_without_other_families(tmp_path: Path) -> Path:
    """A data folder holding only the held-out family's solo runs and no co-location file."""
    iso = pd.read_csv(GAVEL_DIR / "isolated_throughputs.csv")
    own = iso[iso["job_type"].str.startswith(f"{HELD_OUT} (")]
    assert 0 < len(own) < len(iso)
    own.to_csv(tmp_path / "isolated_throughputs.csv", index=False)
    return tmp_path


def test_family_relative_batch_uses_the_family_own_solo_runs_only(tmp_path: Path) -> None:
    full = load_gavel_solo_features(batch_feature="family-relative")
    alone = load_gavel_solo_features(_copy_without_other_families(tmp_path),
                                     batch_feature="family-relative")
    assert not (tmp_path / "colocation_pairs_long.csv").exists()
    mine = [job for job in full.index if family_of(str(job)) == HELD_OUT]
    assert sorted(alone.index) == sorted(mine)
    pd.testing.assert_series_equal(alone.loc[mine, "log_batch_vs_family"],
                                   full.loc[mine, "log_batch_vs_family"])
    # Recommendation's batch sizes are 512..8192: centred on their median, 2048.
    assert full.loc["v100/Recommendation (batch size 512)", "log_batch_vs_family"] == (
        pytest.approx(math.log(512 / 2048)))


def test_batch_feature_options_keep_the_absolute_column() -> None:
    tables = {b: load_gavel_solo_features(batch_feature=b) for b in BATCH_FEATURES}
    assert "log_batch_vs_family" not in tables["absolute"].columns
    assert "log_batch_size" not in tables["family-relative"].columns
    pd.testing.assert_series_equal(tables["both"]["log_batch_size"],
                                   tables["absolute"]["log_batch_size"])
    pd.testing.assert_series_equal(tables["both"]["log_batch_vs_family"],
                                   tables["family-relative"]["log_batch_vs_family"])
    assert (tables["both"].loc["k80/A3C", ["log_batch_size", "log_batch_vs_family"]] == 0).all()
    with pytest.raises(ValueError, match="batch_feature"):
        load_gavel_solo_features(batch_feature="relative")
