"""Library code reports through :mod:`logging`, never ``print``: a consumer, producer or
admin client runs inside someone else's program, whose stdout is its own (a consumer's
"metadata refresh before assigning failed" must be a WARNING record of
``clients.consumer.group_leader``, which the application routes, not a line on stdout).
Commands (``clients.cli``, ``clients.workload``, the Spark jobs) and the code generator
print by design and are not checked.  Reads the files (AST), imports nothing."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIBRARIES = ("clients/consumer", "clients/producer", "clients/admin", "clients/network",
             "clients/records", "clients/memory", "clients/protocol", "storage",
             "replication", "timer")
SCRIPTS = {"clients/protocol/typegen.py"}  # generates code: prints it


def prints_in(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "print"]


def test_library_code_never_prints() -> None:
    found = {}
    for package in LIBRARIES:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = str(path.relative_to(ROOT))
            if relative not in SCRIPTS and (lines := prints_in(path)):
                found[relative] = lines
    assert found == {}, f"print() in library code (use logging): {found}"


def test_the_check_sees_a_print(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import logging\nlogging.warning('x')\nprint('metadata refresh')\n")
    assert prints_in(sample) == [3]
