from pathlib import Path

import pytest

from engine_mlx.bench.measure import shown_path


def test_a_report_names_paths_inside_the_working_folder_relative_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert shown_path(tmp_path / ".bench-envs" / "zlab") == str(Path(".bench-envs") / "zlab")


def test_a_report_names_a_path_outside_the_working_folder_by_its_name_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    assert shown_path(tmp_path / "elsewhere" / "drafter") == "drafter"
