"""The layering, read from the source with ast (every import, at module level or inside a function):
the annotate services import each other without a cycle, the round step services import neither the
tasks, nor the round flow, nor each other, and scoring/ and training/ never import Django or annotate."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
STEP_SERVICES = {"planning", "scoring", "selection", "training", "evaluation"}


def _module(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def _imports(path: Path) -> set[str]:
    """Every module the file imports anywhere; ``from pkg import name`` counts as ``pkg.name`` too."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.add(node.module)
            out.update(f"{node.module}.{alias.name}" for alias in node.names)
    return out


def _graph(package: str) -> dict[str, set[str]]:
    files = {_module(p): p for p in (ROOT / package).rglob("*.py") if "migrations" not in p.parts}
    return {name: _imports(path) & set(files) - {name} for name, path in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path of module names, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_annotate_has_no_import_cycle() -> None:
    graph = _graph("annotate")
    assert "annotate.services.rounds" in graph and graph["annotate.services.rounds"]
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or [])


def test_step_services_import_no_task_no_flow_and_no_other_step() -> None:
    graph = _graph("annotate")
    for step in STEP_SERVICES:
        name = f"annotate.services.{step}"
        forbidden = {"annotate.tasks", "annotate.services.rounds"} | {
            f"annotate.services.{other}" for other in STEP_SERVICES - {step}
        }
        assert not graph[name] & forbidden, f"{name} imports {sorted(graph[name] & forbidden)}"
    helpers = {"annotate.services.round_state", "annotate.services.claims", "annotate.services.workers"}
    for helper in helpers:
        services = {m for m in graph[helper] if m.startswith("annotate.services.")}
        assert services <= helpers, f"{helper} imports {sorted(services - helpers)}"
    assert not {m for m in graph["annotate.services.round_state"] if m.startswith("annotate.services.")}


def test_scoring_and_training_import_neither_django_nor_annotate() -> None:
    for package in ("scoring", "training"):
        for path in (ROOT / package).rglob("*.py"):
            bad = {m for m in _imports(path) if m.split(".")[0] in {"django", "annotate", "config"}}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
