"""The layering, read from the source with ast (every import, at module level or inside a function):
no import cycle anywhere in the tree, the annotate services import each other without a cycle, the
round step services import neither the tasks, nor the round flow, nor each other, the plain-Python
packages (training/, acquisition/, predictor/, scoring/) import only downward in that order and never
Django or annotate, the shipped packages never import the test fixtures (devtools/, tests/), and
production code imports heavy libraries only inside the functions that use them (the web process
starts fast and never loads a model)."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEP_SERVICES = {"planning", "scoring", "selection", "training", "evaluation"}
# The plain-Python packages under annotate, highest first; each imports only those after it:
#   training/     LoRA training, the loop's frozen config, ETAs, curves (trains and evaluates adapters)
#   acquisition/  what to label next: batch selection, the strategies, the portfolio
#   predictor/    what the app believes about an item and how sure: the Predictor, blend, proxy,
#                 calibration, auto-accept thresholds, evaluation, label errors, the stopping rule
#   scoring/      engines, prompts, label codes, the score cache, embeddings, uncertainty signals
LAYERS = ("training", "acquisition", "predictor", "scoring")
PACKAGES = ("config", "annotate", *LAYERS, "devtools", "tests")
# Folders of scripts run with their own folder on sys.path: their modules import each other by file name.
SCRIPT_DIRS = ("bench", "scripts")
PRODUCTION = ("config", "annotate", *LAYERS, "devtools")
SHIPPED = ("config", "annotate", *LAYERS)  # what a deployment runs; devtools/ and tests/ are not
HEAVY = {
    "accelerate", "faiss", "gguf", "matplotlib", "peft", "pyarrow", "safetensors", "sentence_transformers",
    "sklearn", "torch", "transformers", "vllm",
}  # fmt: skip


def _module(path: Path) -> str:
    rel = path.relative_to(ROOT)
    if rel.parts[0] in SCRIPT_DIRS:
        return rel.stem
    return ".".join(rel.with_suffix("").parts).removesuffix(".__init__")


def _imports(source: str, package: str) -> set[str]:
    """Every module the source imports anywhere; ``from pkg import name`` counts as ``pkg.name`` too,
    and a relative import is resolved against ``package`` (the package the source's module is in)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join([*parts, *([node.module] if node.module else [])])
            out.add(module)
            out.update(f"{module}.{alias.name}" for alias in node.names)
    return out


def _files(*roots: str) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            name = _module(path)
            assert name not in files, f"{path.relative_to(ROOT)} and {files[name].relative_to(ROOT)} are both {name}"
            files[name] = path
    return files


def _graph(*roots: str) -> dict[str, set[str]]:
    """Module → the modules of ``roots`` it imports. Importing ``a.b.c`` also runs ``a/__init__`` and
    ``a/b/__init__``; those implicit edges are not counted (a package that re-exports its submodules
    would otherwise be a cycle with each of them), an explicit ``from a.b import x`` is."""
    files = _files(*roots)
    graph = {}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = _imports(path.read_text(), package) & set(files) - {name}
    return graph


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


def _module_level_imports(tree: ast.Module) -> set[str]:
    """Top-level modules imported when the module is imported: outside function bodies (class bodies
    and module-level if/try blocks run at import) and outside ``if TYPE_CHECKING:``."""
    out: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            out.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            out.add(node.module.split(".")[0])
        pending.extend(ast.iter_child_nodes(node))
    return out


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_imports_inside_functions_and_relative_imports_count() -> None:
    source = "import os\nfrom . import sibling\ndef f():\n    from ..other import thing\n    import a.b\n"
    found = _imports(source, "pkg.sub")
    assert {"os", "pkg.sub", "pkg.sub.sibling", "pkg.other", "pkg.other.thing", "a.b"} <= found
    top = _module_level_imports(ast.parse("import torch as t\nclass A:\n    import peft\ndef f():\n    import vllm\n"))
    assert top == {"torch", "peft"}
    guarded = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\nelse:\n    import json\n"
    assert _module_level_imports(ast.parse(guarded)) == {"typing", "json"}


def test_the_whole_tree_has_no_import_cycle() -> None:
    graph = _graph(*PACKAGES, *SCRIPT_DIRS)
    # the graph sees every root, imports inside functions, and the bench scripts' imports of each other
    assert {name.split(".")[0] for name in graph} >= {*PACKAGES, "engine_parity", "tour_images"}
    assert "scoring.engines" in graph["training.ensemble"]  # imported inside train/score functions
    assert "score_bench" in graph["engine_parity"]
    assert "scoring.engines.base" in graph["scoring.engines.hf"]
    # The engine interface never reaches back to its implementations (they import it; the registry
    # imports them), so base ↔ hf / vllm is no cycle.
    assert not graph["scoring.engines.base"] & {"scoring.engines", "scoring.engines.hf", "scoring.engines.vllm"}
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " → ".join(cycle or [])


def test_step_services_import_no_task_no_flow_and_no_other_step() -> None:
    graph = _graph("annotate")
    for step in STEP_SERVICES:
        name = f"annotate.services.{step}"
        forbidden = {"annotate.tasks", "annotate.services.rounds"} | {
            f"annotate.services.{other}" for other in STEP_SERVICES - {step}
        }
        assert not graph[name] & forbidden, f"{name} imports {sorted(graph[name] & forbidden)}"
    helpers = {"annotate.services.round_state", "annotate.services.jobs", "annotate.services.workers"}
    for helper in helpers:
        services = {m for m in graph[helper] if m.startswith("annotate.services.")}
        assert services <= helpers, f"{helper} imports {sorted(services - helpers)}"
    assert not {m for m in graph["annotate.services.round_state"] if m.startswith("annotate.services.")}


def test_shipped_packages_import_neither_devtools_nor_tests() -> None:
    """Test fixtures (the oracle annotator, the crash tests' stall) live in devtools/ and tests/; the
    app reaches them only through a setting naming a callable (annotate/steppoints.py)."""
    graph = _graph(*PACKAGES, *SCRIPT_DIRS)
    for name, imported in sorted(graph.items()):
        if name.split(".")[0] in SHIPPED:
            bad = {m for m in imported if m.split(".")[0] in {"devtools", "tests"}}
            assert not bad, f"{name} imports {sorted(bad)}"
    assert "devtools.oracle" in graph["tests.integration.round_helpers"]  # the graph sees the fixtures' users


def test_every_package_is_in_the_graph_and_the_deployment() -> None:
    """A new top-level package is one the graph checks and one the wheel and the image carry."""
    top = {path.parent.name for path in ROOT.glob("*/__init__.py")}
    assert top == set(PACKAGES), sorted(top ^ set(PACKAGES))
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in SHIPPED:
        assert f"{package}*" in include, f"pyproject.toml's package list lacks {package}"
        assert f"COPY {package} {package}\n" in dockerfile, f"the Dockerfile does not copy {package}/"


def test_plain_python_packages_import_downward_and_never_django_or_annotate() -> None:
    """training → acquisition → predictor → scoring, never back: the loop's config holds the selection
    config (training.ensemble), the portfolio scores arms with the embedding proxy (acquisition.portfolio),
    the predictor averages the engines' distributions (predictor.model). So no cycle between packages."""
    graph = _graph(*PACKAGES)
    edges = {(name.split(".")[0], m.split(".")[0]) for name, imported in graph.items() for m in imported}
    for i, package in enumerate(LAYERS):
        above = {*PACKAGES} - {*LAYERS[i:]}  # annotate, config, the layers above, the test fixtures
        for path in (ROOT / package).rglob("*.py"):
            imported = _imports(path.read_text(), _module(path).rpartition(".")[0])
            bad = {m for m in imported if m.split(".")[0] in {"django", *above}}
            assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
    # the rule is the code's: each step down is taken somewhere
    assert {("training", "acquisition"), ("acquisition", "predictor"), ("predictor", "scoring")} <= edges
    packages = {a: {b for x, b in edges if x == a and b != a} for a in LAYERS}
    assert _cycle(packages) is None


@pytest.mark.parametrize("package", PRODUCTION)
def test_heavy_libraries_are_imported_only_inside_functions(package: str) -> None:
    for path in (ROOT / package).rglob("*.py"):
        heavy = _module_level_imports(ast.parse(path.read_text())) & HEAVY
        assert not heavy, f"{path.relative_to(ROOT)} imports {sorted(heavy)} at module level"


# The pure core in the plain-Python packages and the Django service over it may share a name: they mean
# one thing at two layers (the service builds the core's inputs from rows and stores what it returns).
SAME_THING_TWO_LAYERS = {"label_errors"}


def test_no_two_modules_share_a_name_with_different_meanings() -> None:
    """Issue 36: two modules named selection (the acquisition math beside annotate/services/selection.py,
    the round's selection step), two named signals (uncertainty beside annotate/signals.py, Django
    signals), and the like, made a reader guess which was meant; they were renamed (batch, uncertainty,
    embedding_proxy, stopping_rule, eta). Names inside annotate repeat only across its layers (services,
    selectors, views, commands), which is one meaning at several layers."""
    stems = [p.stem for pkg in LAYERS for p in (ROOT / pkg).rglob("*.py") if p.stem != "__init__"]
    app = {p.stem for p in (ROOT / "annotate").rglob("*.py") if p.stem != "__init__" and "migrations" not in p.parts}
    assert set(stems) & app == SAME_THING_TWO_LAYERS
    assert len(stems) == len(set(stems)), sorted({s for s in stems if stems.count(s) > 1})


def test_every_import_of_our_packages_names_a_module_that_exists() -> None:
    """A module moved (annotate/services/oracle.py → devtools/oracle.py) and a bench script that imports
    it inside a function broke silently until someone ran it (bench/cpu_round.py, session 19). Every
    import of our packages, anywhere in the tree and at any depth, names a module that exists or a name
    in one (``from pkg.mod import name``)."""
    files = _files(*PACKAGES, *SCRIPT_DIRS)
    ours = set(PACKAGES)
    broken = []
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for imported in _imports(path.read_text(), package):
            if imported.split(".")[0] in ours and imported not in files and imported.rpartition(".")[0] not in files:
                broken.append(f"{name} imports {imported}")
    assert not broken, broken
