"""docs/architecture.md's produce and fetch traces name code that exists.

Every dotted name in the two trace diagrams (``Partition.read_records``,
``core.isr.maybe_expand_isr``) must end in a function, method or class defined in the
product, and when it starts with a class name, that class must define it; every
``handle_*`` and ``_private`` name must be a function defined in the product.  Reads
the files (AST), imports nothing.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "storage", "replication", "timer", "clients")
TRACES = ("## One produce", "## One fetch")
NOT_OURS = {"os"}


def _definitions() -> tuple[set[str], dict[str, set[str]]]:
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for top in PACKAGES:
        for path in (ROOT / top).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    names.add(node.name)
                if isinstance(node, ast.ClassDef):
                    members = classes.setdefault(node.name, set())
                    members.update(n.name for n in node.body if isinstance(
                        n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))
    return names, classes


def _trace_blocks(text: str) -> list[str]:
    blocks = []
    for heading in TRACES:
        start = text.index(heading)
        body = text[start:].split("```", 2)[1]
        blocks.append(body)
    return blocks


def unknown_names(text: str) -> list[str]:
    names, classes = _definitions()
    missing = []
    for block in _trace_blocks(text):
        for token in sorted(set(re.findall(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+", block))):
            parts = token.split(".")
            if parts[0] in NOT_OURS:
                continue
            if parts[0][0].isupper() and parts[0] in classes and len(parts) == 2:
                if parts[1] not in classes[parts[0]]:
                    missing.append(token)
            elif parts[-1] not in names:
                missing.append(token)
        for token in sorted(set(re.findall(r"(?<![\w.])(handle_\w+|_[a-z]\w+)", block))):
            if token not in names:
                missing.append(token)
    return missing


def test_traces_name_functions_that_exist() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    assert unknown_names(text) == []


def test_a_renamed_function_is_caught() -> None:
    text = (ROOT / "docs" / "architecture.md").read_text()
    broken = text.replace("Partition.read_records", "Partition.read_batches_gone")
    assert "Partition.read_batches_gone" in unknown_names(broken)
