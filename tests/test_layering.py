"""The import contract of the code base (docs/architecture.md), checked over the AST.

Rules, each a test below:

- **Direction.** ``timer`` imports no other project package; ``clients`` never imports
  ``broker``, ``replication`` or ``storage``; ``storage`` never imports ``replication``
  or ``broker``; ``replication`` never imports ``broker``.  Below ``clients``, only its
  foundation subpackages (``clients.protocol``, ``clients.records``, ``clients.memory``)
  may be used; ``broker.cluster`` (the local launcher and ``cluster status``, a client of
  the brokers) may also use ``clients.network``.
- **No cycles** between modules, directly or through a loop.  Every import counts,
  including imports inside functions and under ``TYPE_CHECKING``; a module importing its
  own package's ``__init__`` is not an edge.
- **One definition per name, imported from where it lives.**  ``from X import n`` in
  project code names the module that defines ``n`` (or a submodule ``X.n``); no public
  class is defined in two modules; ``__all__`` of a module (not a package ``__init__``)
  lists only names the module defines.
- **Rooms stay small**: no package directory holds more than 15 modules directly.
- **One composition root.**  Only the wiring (``broker.server``, which starts a broker)
  imports the broker's composition root ``broker.core``; the request handlers
  (``broker.handlers``) import nothing from it or its rooms (``broker.replica``) but
  Protocols, exceptions, constants and functions: they work on
  ``broker.handlers.broker_view.HandlerCore``.
- **Classes and modules stay readable**: no class over 400 lines, no module over 600
  (tests and generated code aside).  The ones over it today are listed in
  :data:`OVERSIZE` with their size now: they may shrink, never grow, and no other may
  join them (issue 31 splits them by concept).
- **Nothing untyped is attached from outside.**  No attribute a class declares ``Any``
  (``self.x: Any = ...`` or a class-level ``x: Any``) is assigned through another object
  (``core.x = ...``): collaborators come in at construction, with real types.

The checks read files, never import them.  Cost: one parse of each project module,
well under a second.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("broker", "storage", "replication", "timer", "clients")
MAX_MODULES_PER_PACKAGE = 15

# (importer prefix, imported prefix) pairs that are forbidden.
FORBIDDEN = (
    ("timer", "broker"), ("timer", "storage"), ("timer", "replication"), ("timer", "clients"),
    ("clients", "broker"), ("clients", "replication"), ("clients", "storage"),
    ("storage", "replication"), ("storage", "broker"),
    ("replication", "broker"),
)  # fmt: skip
CLIENT_FOUNDATIONS = ("clients.protocol", "clients.records", "clients.memory")
COMPOSITION_ROOT = "broker.core"
COMPOSITION_ROOMS = (COMPOSITION_ROOT, "broker.replica")
WIRING = ("broker.server",)
HANDLERS = "broker.handlers"
MAX_CLASS_LINES = 400
MAX_MODULE_LINES = 600
# over the limits on 2026-11-29, to be split by concept (issue 31): their size then
OVERSIZE = {
    "broker/network/process.py": 656, "broker/network/process.py:NetworkProcess": 530,
    "broker/server.py": 615, "broker/server.py:BrokerServer": 487,
    "storage/log/log.py": 641, "storage/log/log.py:Log": 474,
    "clients/admin.py": 714, "clients/admin.py:Admin": 553,
    "clients/network/connection.py": 614,
}  # fmt: skip
EXTRA_CLIENT_PACKAGES = {"broker.cluster": ("clients.network",)}


@dataclass
class Module:
    name: str
    path: str  # relative to the tree's root, for messages
    tree: ast.Module
    is_package: bool
    defined: set[str] = field(default_factory=set)


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def load_modules(root: Path = ROOT) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for top in PACKAGES:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            parts = list(rel.parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            name = ".".join(parts)
            tree = ast.parse(path.read_text(), filename=str(path))
            modules[name] = Module(name, str(path.relative_to(root)), tree, is_package,
                                   _defined_names(tree))
    return modules


def _defined_names(tree: ast.Module) -> set[str]:
    """Names a module binds at top level by definition or assignment (not by import)."""
    names: set[str] = set()

    def visit(stmts: list[ast.stmt]) -> None:
        for node in stmts:
            if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
            elif isinstance(node, (ast.If, ast.Try)):
                visit(node.body)
                visit(node.orelse)
                if isinstance(node, ast.Try):
                    for handler in node.handlers:
                        visit(handler.body)
                    visit(node.finalbody)

    visit(tree.body)
    return names


def _absolute(module: Module, node: ast.ImportFrom) -> str:
    base = node.module or ""
    if not node.level:
        return base
    parts = module.name.split(".")
    keep = len(parts) - node.level + (1 if module.is_package else 0)
    return ".".join(parts[:keep] + ([base] if base else []))


def _imports(module: Module, modules: dict[str, Module]) -> list[tuple[int, str, str | None]]:
    """(line, target module, imported name or None) for every project import."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    out.append((node.lineno, alias.name, None))
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            target = _absolute(module, node)
            if target.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                if sub in modules:
                    out.append((node.lineno, sub, None))
                else:
                    out.append((node.lineno, target, alias.name))
    return out


def import_graph(modules: dict[str, Module]) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for name, module in modules.items():
        for _line, target, _n in _imports(module, modules):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if not target or target == name:
                continue
            if modules[target].is_package and _under(name, target):
                continue  # a submodule importing its own package's __init__
            graph[name].add(target)
    return graph


def direction_violations(modules: dict[str, Module]) -> list[str]:
    problems = []
    for name, module in sorted(modules.items()):
        top = name.split(".")[0]
        for line, target, _n in _imports(module, modules):
            where = f"{module.path}:{line}: {name} imports {target}"
            for importer, imported in FORBIDDEN:
                if top == importer and _under(target, imported):
                    problems.append(f"{where} ({importer} must not import {imported})")
            if top != "clients" and _under(target, "clients"):
                allowed = CLIENT_FOUNDATIONS + next(
                    (extra for pkg, extra in EXTRA_CLIENT_PACKAGES.items() if _under(name, pkg)),
                    (),
                )
                if not any(_under(target, ok) for ok in allowed):
                    problems.append(f"{where} (below clients only {', '.join(allowed)})")
    return problems


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def definition_violations(modules: dict[str, Module]) -> list[str]:
    problems = []
    for name, module in sorted(modules.items()):
        for line, target, imported in _imports(module, modules):
            if imported is None or target not in modules:
                continue
            if imported not in modules[target].defined:
                problems.append(
                    f"{module.path}:{line}: {name} imports {imported} from "
                    f"{target}, which does not define it (import it from where it lives)"
                )
        if module.is_package:
            continue
        for node in module.tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "__all__"
                    and isinstance(node.value, (ast.List, ast.Tuple))):
                for element in node.value.elts:
                    if isinstance(element, ast.Constant) and element.value not in module.defined:
                        problems.append(f"{module.path}: __all__ of {name} "
                                        f"lists {element.value!r}, which it does not define")
    return problems


def duplicate_classes(modules: dict[str, Module]) -> dict[str, list[str]]:
    where: dict[str, list[str]] = defaultdict(list)
    for name, module in modules.items():
        for node in module.tree.body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where[node.name].append(name)
    return {cls: sorted(mods) for cls, mods in where.items() if len(mods) > 1}


def crowded_packages(modules: dict[str, Module]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for module in modules.values():
        if not module.is_package:
            counts[str(Path(module.path).parent)] += 1
    return {pkg: n for pkg, n in counts.items() if n > MAX_MODULES_PER_PACKAGE}


def _is_protocol_or_error(node: ast.ClassDef) -> bool:
    bases = {b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute)
             else "" for b in node.bases}
    return "Protocol" in bases or any(b.endswith(("Error", "Exception")) for b in bases)


def composition_violations(modules: dict[str, Module]) -> list[str]:
    """Imports of the composition root outside the wiring, and handlers' imports of
    concrete classes of the composition's rooms."""
    problems = []
    for name, module in sorted(modules.items()):
        for line, target, imported in _imports(module, modules):
            where = f"{module.path}:{line}: {name} imports {target}"
            if (_under(target, COMPOSITION_ROOT) and not _under(name, COMPOSITION_ROOT)
                    and not any(_under(name, w) for w in WIRING)):
                problems.append(f"{where} (only the wiring imports the composition root)")
                continue
            if not _under(name, HANDLERS) or not any(_under(target, r)
                                                      for r in COMPOSITION_ROOMS):
                continue
            if imported is None or target not in modules:
                problems.append(f"{where} (handlers import Protocols by name)")
                continue
            for node in modules[target].tree.body:
                if (isinstance(node, ast.ClassDef) and node.name == imported
                        and not _is_protocol_or_error(node)):
                    problems.append(f"{where}.{imported} (a concrete class of the "
                                    "composition: handlers use a Protocol)")
    return problems


def any_typed_attributes(modules: dict[str, Module]) -> set[str]:
    """Attribute names some class declares ``Any``."""
    names: set[str] = set()
    for module in modules.values():
        for node in ast.walk(module.tree):
            if not isinstance(node, ast.AnnAssign) or not (
                    isinstance(node.annotation, ast.Name) and node.annotation.id == "Any"):
                continue
            target = node.target
            if (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                    and target.value.id == "self"):
                names.add(target.attr)
            elif isinstance(target, ast.Name):  # class level (module-level names too:
                names.add(target.id)  # harmless, they are never assigned through objects)
    return names


def outside_any_assignments(modules: dict[str, Module]) -> list[str]:
    untyped = any_typed_attributes(modules)
    problems = []
    for name, module in sorted(modules.items()):
        for node in ast.walk(module.tree):
            targets = (node.targets if isinstance(node, ast.Assign)
                       else [node.target] if isinstance(node, ast.AnnAssign) else [])
            for target in targets:
                if (isinstance(target, ast.Attribute) and target.attr in untyped
                        and not (isinstance(target.value, ast.Name)
                                 and target.value.id in ("self", "cls"))):
                    problems.append(f"{module.path}:{node.lineno}: {name} assigns the "
                                    f"Any-typed attribute {target.attr!r} of another object")
    return problems


@pytest.fixture(scope="module")
def modules() -> dict[str, Module]:
    return load_modules()


def test_imports_follow_the_layer_direction(modules: dict[str, Module]) -> None:
    problems = direction_violations(modules)
    assert not problems, "\n".join(problems)


def test_no_import_cycles_between_modules(modules: dict[str, Module]) -> None:
    found = cycles(import_graph(modules))
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_names_are_imported_from_the_module_that_defines_them(
    modules: dict[str, Module],
) -> None:
    problems = definition_violations(modules)
    assert not problems, "\n".join(problems)


def test_no_public_class_is_defined_twice(modules: dict[str, Module]) -> None:
    assert duplicate_classes(modules) == {}


def test_no_package_directory_is_crowded(modules: dict[str, Module]) -> None:
    assert crowded_packages(modules) == {}


def oversize(modules: dict[str, Module], root: Path = ROOT) -> dict[str, int]:
    """Modules over MAX_MODULE_LINES and classes over MAX_CLASS_LINES: their sizes."""
    found: dict[str, int] = {}
    for module in modules.values():
        lines = len((root / module.path).read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found[module.path] = lines
        for node in ast.walk(module.tree):
            if isinstance(node, ast.ClassDef) and node.end_lineno is not None:
                size = node.end_lineno - node.lineno + 1
                if size > MAX_CLASS_LINES:
                    found[f"{module.path}:{node.name}"] = size
    return found


def test_no_class_or_module_grows_past_the_limits(modules: dict[str, Module]) -> None:
    found = oversize(modules)
    grown = {where: (size, OVERSIZE.get(where)) for where, size in found.items()
             if size > OVERSIZE.get(where, 0)}
    assert not grown, f"over the limits (lines now, allowed): {grown}"
    # a split brought one under the limit: take it off the list, so it stays under
    assert set(OVERSIZE) <= set(found), f"no longer oversize: {set(OVERSIZE) - set(found)}"


def test_only_the_wiring_imports_the_composition_root(modules: dict[str, Module]) -> None:
    problems = composition_violations(modules)
    assert not problems, "\n".join(problems)


def test_no_any_typed_attribute_is_assigned_from_outside(modules: dict[str, Module]) -> None:
    problems = outside_any_assignments(modules)
    assert not problems, "\n".join(problems)


# -- the checker itself, on small synthetic trees -------------------------------------


def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for top in PACKAGES:
        (tmp_path / top).mkdir(exist_ok=True)
    return load_modules(tmp_path)


def test_checker_sees_a_forbidden_import_inside_a_function(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "storage/__init__.py": "",
        "storage/log.py": "def f():\n    from replication.partition import Partition\n",
        "replication/__init__.py": "",
        "replication/partition.py": "class Partition: ...\n",
        "clients/__init__.py": "",
        "clients/consumer.py": "X = 1\n",
        "broker/__init__.py": "",
        "broker/core.py": "from clients.consumer import X\n",
    })
    problems = direction_violations(mods)
    assert any("storage.log imports replication.partition" in p for p in problems)
    assert any("broker.core imports clients.consumer" in p for p in problems)
    assert len(problems) == 2


def test_checker_finds_a_three_module_loop_through_type_checking_imports(
    tmp_path: Path,
) -> None:
    mods = _tree(tmp_path, {
        "broker/__init__.py": "",
        "broker/a.py": "from broker.b import B\nclass A: ...\n",
        "broker/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                   "    from broker.c import C\nclass B: ...\n",
        "broker/c.py": "def f():\n    from broker.a import A\nclass C: ...\n",
        "broker/d.py": "from broker.a import A\n",
    })
    assert cycles(import_graph(mods)) == [["broker.a", "broker.b", "broker.c"]]


def test_checker_rejects_reexports_and_double_definitions(tmp_path: Path) -> None:
    mods = _tree(tmp_path, {
        "clients/__init__.py": "",
        "clients/errors.py": "class BoomError(Exception): ...\n",
        "clients/hub.py": "from clients.errors import BoomError\n__all__ = ['BoomError']\n",
        "clients/user.py": "from clients.hub import BoomError\n",
        "clients/other.py": "class BoomError(Exception): ...\n",
    })
    problems = definition_violations(mods)
    assert len(problems) == 2
    assert "clients.user imports BoomError from clients.hub" in problems[0] + problems[1]
    assert duplicate_classes(mods) == {"BoomError": ["clients.errors", "clients.other"]}
