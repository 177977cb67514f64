"""matplotlib for the benches, when it is installed: a figure to draw on, then saved.

:func:`figure` returns ``(pyplot, figure, axes)`` with the non-interactive Agg backend,
or None when matplotlib is missing (a bench then writes its JSON without a PNG);
:func:`save` lays the figure out, writes it at 100 dpi and closes it.  Costs: the
import of matplotlib on the first call.  Not thread-safe (pyplot's global state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def figure(ncols: int = 1, figsize: tuple[float, float] = (6, 4)) -> tuple[Any, Any, Any] | None:
    """``(pyplot, figure, axes)`` of ``ncols`` side by side, or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, ncols, figsize=figsize)
    return plt, fig, axes


def save(plt: Any, fig: Any, path: Path) -> bool:
    """Write ``fig`` to ``path`` (tight layout, 100 dpi) and close it; True."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
