"""The map in docs/architecture.md holds for the code: every import follows its table of import
directions, every module belongs to a listed part and names its section, and the map's module
tables name the files that exist."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "swarm"
MAP = ROOT / "docs" / "architecture.md"
MARKER = "<!-- import-directions"
#: the section of docs/architecture.md each part's modules name in their docstrings
SECTIONS = {
    "shared": "Shared value types",
    "engines": "Engines",
    "workload": "Workload",
    "trace": "The trace",
    "clients": "Clients",
    "emulator": "The emulator",
    "replay": "Replay",
    "analysis": "Analysis",
    "shape": "Shape",
    "runtime": "Runtime",
    "cluster": "Ray",
    "sim": "Simulation",
    "launch": "Launch",
    "sweep": "Sweeps",
    "cli": "CLI",
}
#: third-party packages only some parts may import
ONLY_IN = {"ray": {"cluster"}, "typer": {"cli"}, "rich": {"cli"}}


def directions() -> tuple[dict[str, list[str]], dict[str, set[str]]]:
    """(part -> path patterns under swarm/, part -> parts it may import), from the map's table."""
    text = MAP.read_text()
    assert MARKER in text, "docs/architecture.md lost its table of import directions"
    rows = text[text.index(MARKER) :].split("\n")[3:]
    paths: dict[str, list[str]] = {}
    allowed: dict[str, set[str]] = {}
    for row in rows:
        if not row.startswith("|"):
            break
        part, modules, may = (cell.strip() for cell in row.strip("|").split("|"))
        paths[part] = [m.removeprefix("swarm/") for m in re.findall(r"`([^`]+)`", modules)]
        allowed[part] = {p.strip() for p in may.split(",")}
    return paths, allowed


def module_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def part_of(rel: str, paths: dict[str, list[str]]) -> str:
    hits = [
        part
        for part, pats in paths.items()
        for pat in pats
        if rel == pat or (pat.endswith("/") and rel.startswith(pat))
    ]
    assert len(hits) == 1, f"swarm/{rel} is in {len(hits)} parts of the map ({hits}): give it exactly one"
    return hits[0]


def rel_of_module(name: str) -> str | None:
    """``swarm.a.b`` -> ``a/b.py`` or ``a/b/__init__.py`` (None for a name that is not a module)."""
    parts = name.split(".")[1:]
    if not parts:
        return "__init__.py"
    for rel in ("/".join(parts) + ".py", "/".join(parts) + "/__init__.py"):
        if (PACKAGE / rel).exists():
            return rel
    return None


def imports(path: Path) -> list[tuple[str, int, bool]]:
    """(imported module, line, at module level) for every import in the file."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    out: list[tuple[str, int, bool]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno, id(node) in top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.module, node.lineno, id(node) in top))
            if node.module == "swarm":  # from swarm import cli: a submodule
                out += [(f"swarm.{a.name}", node.lineno, id(node) in top) for a in node.names]
    return out


def test_every_import_follows_the_maps_directions() -> None:
    paths, allowed = directions()
    assert set(paths) == set(SECTIONS), "the map's parts changed: update SECTIONS here and the docstrings"
    wrong: list[str] = []
    for path in module_files():
        rel = path.relative_to(PACKAGE).as_posix()
        part = part_of(rel, paths)
        for name, line, at_top in imports(path):
            root = name.split(".")[0]
            if root in ONLY_IN and part not in ONLY_IN[root]:
                wrong.append(f"swarm/{rel}:{line} imports {root}, which only {sorted(ONLY_IN[root])} may")
            if root == "ray" and at_top:
                wrong.append(f"swarm/{rel}:{line} imports ray at module level (only inside functions)")
            if root != "swarm":
                continue
            target_rel = rel_of_module(name)
            if target_rel is None:
                continue
            target = part_of(target_rel, paths)
            if target != part and target not in allowed[part]:
                wrong.append(
                    f"swarm/{rel}:{line} ({part}) imports {name} ({target}): not in the map's directions"
                )
    assert wrong == []


def test_every_module_names_its_section_of_the_map() -> None:
    paths, _ = directions()
    headings = set(re.findall(r"^## (.+)$", MAP.read_text(), re.M))
    assert set(SECTIONS.values()) <= headings
    wrong = []
    for path in module_files():
        rel = path.relative_to(PACKAGE).as_posix()
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        m = re.search(r'Place in the map \(docs/architecture\.md, "([^"]+)"', doc)
        want = SECTIONS[part_of(rel, paths)]
        if m is None or m.group(1) != want:
            wrong.append(
                f'swarm/{rel}: docstring should say Place in the map (docs/architecture.md, "{want}")'
            )
    assert wrong == []


def test_the_maps_module_tables_name_the_files_that_exist() -> None:
    text = MAP.read_text()
    named = set(re.findall(r"^\| `((?:[a-z_0-9]+/)?[a-z_0-9]+\.py)` \|", text, re.M))
    files = {p.relative_to(PACKAGE).as_posix() for p in module_files()}
    stale = sorted(n for n in named if n not in files and n.removeprefix("swarm/") not in files)
    assert stale == [], f"docs/architecture.md names modules that do not exist: {stale}"
    listed = {n.removeprefix("swarm/") for n in named}
    unlisted = sorted(
        f
        for f in files
        if f not in listed and not f.endswith("__init__.py") and not f.endswith("__main__.py")
    )
    assert unlisted == [], f"modules missing from the map's tables: {unlisted}"


@pytest.mark.parametrize("bad", ["analysis imports runtime", "ray at module level"])
def test_the_check_catches_a_wrong_import(bad: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk is not vacuous: a module that breaks a rule is reported."""
    paths, allowed = directions()
    src = "from swarm.runtime.stop import StopConditions\n" if bad.startswith("analysis") else "import ray\n"
    fake = tmp_path / "probe.py"
    fake.write_text(src)
    found = imports(fake)
    name, _, at_top = found[0]
    if bad.startswith("analysis"):
        target = part_of(rel_of_module(name) or "", paths)
        assert target == "runtime" and target not in allowed["analysis"]
    else:
        assert name == "ray" and at_top


def loaded_by(module: str) -> set[str]:
    code = f"import sys, {module}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    return set(out.stdout.split())


def test_value_types_need_only_the_standard_library() -> None:
    startup = loaded_by("sys")  # what the interpreter's site setup loads anyway
    new = {m.split(".")[0] for m in loaded_by("swarm.request") - startup}
    assert new - set(sys.stdlib_module_names) == {"swarm"}, new


def test_the_agent_program_does_not_load_the_clients() -> None:
    loaded = loaded_by("swarm.runtime.agent")
    assert not {m for m in loaded if m.startswith("swarm.clients") or m.split(".")[0] == "aiohttp"}


def test_the_package_uses_no_relative_imports() -> None:
    """The import walk reads absolute imports only; a relative one would slip past it."""
    relative = [
        f"{p.relative_to(ROOT)}:{n.lineno}"
        for p in module_files()
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, ast.ImportFrom) and n.level > 0
    ]
    assert relative == []


def test_the_runtime_reaches_the_emulator_only_to_start_it() -> None:
    paths, _ = directions()
    wrong = [
        f"swarm/{p.relative_to(PACKAGE).as_posix()}:{line} imports {name}"
        for p in module_files()
        if part_of(p.relative_to(PACKAGE).as_posix(), paths) == "runtime"
        for name, line, _ in imports(p)
        if name.startswith("swarm.emulator") and name != "swarm.emulator.process"
    ]
    assert wrong == []


def import_graph() -> dict[str, set[str]]:
    """Module -> the swarm modules it imports (at module level, in functions, or for the type
    checker alike)."""
    graph: dict[str, set[str]] = {}
    for path in module_files():
        rel = path.relative_to(PACKAGE).as_posix()
        graph[rel] = set()
        for name, _, _ in imports(path):
            target = rel_of_module(name) if name.split(".")[0] == "swarm" else None
            if target is not None and target != rel:
                graph[rel].add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.append(sorted(group))
    return found


def test_no_import_circle_anywhere() -> None:
    assert circles(import_graph()) == []


def test_the_circle_check_finds_a_circle() -> None:
    assert circles({"a.py": {"b.py"}, "b.py": {"c.py"}, "c.py": {"a.py"}, "d.py": {"a.py"}}) == [
        ["a.py", "b.py", "c.py"]
    ]


#: the CLI's own support, which its command modules share; a command module imports no other
#: command module (what two commands share is library code, or one of these)
CLI_SUPPORT = {
    "cli/__init__.py", "cli/app.py", "cli/flags.py", "cli/flagdef.py", "cli/flagdefs.py", "cli/compose.py",
    "cli/options.py", "cli/sending.py", "cli/live.py", "cli/sweep_view.py", "cli/twins.py",
}  # fmt: skip


def test_cli_commands_share_only_the_clis_support_and_the_library() -> None:
    graph = import_graph()
    wrong = [
        f"swarm/{rel} imports swarm/{target}"
        for rel, targets in graph.items()
        if rel.startswith("cli/") and rel != "cli/__init__.py"
        for target in targets
        if target.startswith("cli/") and target not in CLI_SUPPORT
    ]
    assert wrong == []
    support_imports = {t for rel in CLI_SUPPORT - {"cli/__init__.py"} for t in graph.get(rel, ())}
    assert not {t for t in support_imports if t.startswith("cli/") and t not in CLI_SUPPORT}


#: a sweep's analysis reads folders on disk, like ``analysis``: it never imports the runtime,
#: the clients, the cluster or the launcher
SWEEP_ANALYSIS = {
    "sweep/__init__.py", "sweep/manifest.py", "sweep/point_figures.py", "sweep/curves.py", "sweep/working_set.py",
    "sweep/report.py", "sweep/compare.py", "sweep/html.py", "sweep/point_intervals.py",
}  # fmt: skip


def test_a_sweeps_analysis_reads_only_what_is_on_disk() -> None:
    paths, _ = directions()
    graph = import_graph()
    wrong = [
        f"swarm/{rel} imports swarm/{target} ({part_of(target, paths)})"
        for rel in sorted(SWEEP_ANALYSIS)
        for target in graph[rel]
        if target not in SWEEP_ANALYSIS and part_of(target, paths) not in {"shared", "engines", "trace", "analysis"}
    ]
    assert wrong == []


def test_no_function_is_longer_than_100_lines() -> None:
    long = [
        f"swarm/{p.relative_to(PACKAGE).as_posix()}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
        for p in module_files()
        for n in ast.walk(ast.parse(p.read_text()))
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
        and n.end_lineno is not None
        and n.end_lineno - n.lineno + 1 > 100
    ]
    assert long == []
