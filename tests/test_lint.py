"""The code base stays ruff-clean (configuration in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_reports_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "."],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
