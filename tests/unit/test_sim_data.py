"""The simulation's data files: fixed pool and test samples with the rows' own ids."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from annotate.simulation.harness import SimulationError, prepare_data, read_rows


def _write(folder: Path, train: int, test: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.csv", train), ("test.csv", test)):
        with (folder / name).open("w", newline="") as f:
            csv.writer(f).writerows([("text", "label"), *((f"{name} row {i}", "ab"[i % 2]) for i in range(n))])


def _ids(path: Path) -> list[str]:
    with path.open(newline="") as f:
        return [row["id"] for row in csv.DictReader(f)]


def test_test_sample_is_fixed_keeps_ids_and_gets_its_own_file(tmp_path: Path) -> None:
    _write(tmp_path / "d", train=50, test=40)
    full = prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w")
    assert full.n_test == 40 and _ids(full.test_csv) == [f"test-{i}" for i in range(40)]
    a = prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w", test_sample=15, pool_sample=20)
    b = prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "other", test_sample=15, pool_sample=20)
    assert a.n_test == 15 and a.n_pool == 20
    assert a.test_csv != full.test_csv and a.pool_csv != full.pool_csv  # never an earlier run's file
    assert _ids(a.test_csv) == _ids(b.test_csv) and _ids(a.pool_csv) == _ids(b.pool_csv)  # fixed
    test_rows = read_rows(tmp_path / "d" / "test.csv")
    for (text, label), item_id in zip(read_rows(a.test_csv), _ids(a.test_csv), strict=True):
        assert test_rows[int(item_id.removeprefix("test-"))] == (text, label)  # the row's own id
    assert _ids(full.test_csv) == [f"test-{i}" for i in range(40)]  # the full file untouched
    # A sample at or over the split's size is the whole split.
    assert prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w", test_sample=40).test_csv == full.test_csv


def test_missing_split_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    with pytest.raises(SimulationError, match="test.csv"):
        (tmp_path / "d" / "train.csv").write_text("text,label\na,b\n")
        prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w", test_sample=3)


def _write_labels(folder: Path, labels: str, train: int, test: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, n in (("train.csv", train), ("test.csv", test)):
        with (folder / name).open("w", newline="") as f:
            rows = ((f"{name} row {i}", labels[i % len(labels)]) for i in range(n))
            csv.writer(f).writerows([("text", "label"), *rows])


def test_a_label_subset_keeps_only_its_labels_rows_with_their_ids_and_its_own_files(tmp_path: Path) -> None:
    _write_labels(tmp_path / "d", "abcdef", train=60, test=30)
    full = prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w")
    part = prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w", label_subset=3, pool_sample=8)
    again = prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "other", label_subset=3, pool_sample=8)
    assert len(part.label_names) == 3 and set(part.label_names) < set(full.label_names)
    assert part.label_names == again.label_names and _ids(part.pool_csv) == _ids(again.pool_csv)  # fixed
    assert part.name == "d-3labels" and full.name == "d"  # records of the two never mix
    assert part.n_pool == 8 and part.n_test == 15  # the pool sample is drawn from the subset's 30 rows
    train_rows, test_rows = read_rows(tmp_path / "d" / "train.csv"), read_rows(tmp_path / "d" / "test.csv")
    for path, rows, prefix in ((part.pool_csv, train_rows, "train-"), (part.test_csv, test_rows, "test-")):
        for (text, label), item_id in zip(read_rows(path), _ids(path), strict=True):
            assert label in part.label_names and rows[int(item_id.removeprefix(prefix))] == (text, label)
    # The full-data job trains on the subset's rows only; the shared files stay whole.
    assert {label for _, label in read_rows(part.train_csv)} == set(part.label_names)
    assert len(read_rows(part.train_csv)) == 30 and full.train_csv == tmp_path / "d" / "train.csv"
    assert full.n_pool == 60 and len(full.label_names) == 6
    # A subset as large as the label set is refused (it would be the whole set under another name).
    with pytest.raises(SimulationError, match="not smaller than the 6 labels"):
        prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w", label_subset=6)


@pytest.mark.parametrize("size", [1, -2])
def test_a_label_subset_needs_two_labels(tmp_path: Path, size: int) -> None:
    _write_labels(tmp_path / "d", "abc", train=9, test=3)
    with pytest.raises(SimulationError, match="at least 2 labels"):
        prepare_data(data_dir=tmp_path / "d", work_dir=tmp_path / "w", label_subset=size)
