"""The code base stays ruff-clean and mypy-clean (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_reports_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_reports_nothing_on_the_product() -> None:
    """Every product package, typed as pyproject.toml says (check_untyped_defs); about
    6 s from a cold cache on the 2-core test machine."""
    result = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental",
                             "broker", "storage", "replication", "timer", "clients"],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
