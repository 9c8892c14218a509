"""How many notebooks the report runs at once."""

from __future__ import annotations

import os

import pytest

from workbench.present.report import report_jobs


def test_one_notebook_per_core_at_most_as_many_as_there_are(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WORKBENCH_REPORT_JOBS", raising=False)
    cores = os.cpu_count() or 1
    assert report_jobs(7) == min(7, cores)
    assert report_jobs(1) == 1


def test_the_variable_sets_it_and_a_bad_value_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKBENCH_REPORT_JOBS", "1")
    assert report_jobs(7) == 1
    monkeypatch.setenv("WORKBENCH_REPORT_JOBS", "3")
    assert report_jobs(2) == 2
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("WORKBENCH_REPORT_JOBS", bad)
        with pytest.raises(ValueError, match=f"WORKBENCH_REPORT_JOBS: '{bad}'"):
            report_jobs(7)
