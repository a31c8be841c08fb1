"""The package reads as its pipeline: each layer imports only the layers before it, with no cycle,
and no module imports another module's private name (docs/design/layout.md).

Every import counts, a function's deferred `import` included: a deferred import is still a layer
that reaches back up.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tritoncheck"

# In pipeline order: a module may import its own layer and the layers above it, never one below.
LAYERS = (
    ("language", ("tritoncheck.dtypes", "tritoncheck.expr")),
    ("results", ("tritoncheck.report",)),
    ("checks", ("tritoncheck.checks",)),
    ("spec", ("tritoncheck.spec",)),
    ("plan", ("tritoncheck.plan",)),
    ("kernel", ("tritoncheck.kernel",)),
    ("codegen", ("tritoncheck.codegen",)),
    ("backends", ("tritoncheck.backends",)),
    ("api", ("tritoncheck.api",)),
    ("derive", ("tritoncheck.derive",)),
    ("integrations", ("tritoncheck.integrations",)),
    ("command plumbing", ("tritoncheck.cli.commands",)),
    ("scanning", ("tritoncheck.scanning",)),
    ("strategies", ("tritoncheck.strategies", "tritoncheck.pytest_plugin")),
    ("commands", ("tritoncheck.cli",)),
)
FACADE = "tritoncheck"  # `tritoncheck/__init__.py` names the public API lazily, from every layer


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in PACKAGE.rglob("*.py") if p.name != "__main__.py"}


def layer_of(module: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"{module} is in no layer: add it to LAYERS (and to docs/design/layout.md)"
    return best[0]


def imports(module: str, path: Path, known: set[str]) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) for every tritoncheck import in `path`."""
    is_package = path.name == "__init__.py"
    here = module if is_package else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and ast.unparse(block.test) == "TYPE_CHECKING"
                   for stmt in block.body for n in ast.walk(stmt)}  # never run: not a dependency
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.split(".")[0] == "tritoncheck"]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = here.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
            if base.split(".")[0] != "tritoncheck":
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub, None) if sub in known else (node.lineno, base, a.name))
    return out


def test_every_layer_imports_only_the_layers_before_it():
    known = modules()
    wrong = []
    for module, path in known.items():
        if module == FACADE:
            continue
        for line, target, _ in imports(module, path, set(known)):
            if target != FACADE and layer_of(target) > layer_of(module):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {module} ({LAYERS[layer_of(module)][0]}) "
                             f"imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not wrong, "imports that reach back up a layer:\n" + "\n".join(wrong)


def test_no_module_imports_itself_back():
    known = modules()
    graph = {m: {t for _, t, _ in imports(m, p, set(known)) if t in known and t != m and t != FACADE}
             for m, p in known.items() if m != FACADE}
    # a package's modules import their siblings through it: `tritoncheck.x.y` needs `tritoncheck.x` loaded
    cycles, state = [], {}

    def visit(m: str, stack: list[str]) -> None:
        state[m] = "open"
        for t in sorted(graph.get(m, ())):
            if state.get(t) == "open":
                cycles.append(" -> ".join(stack[stack.index(t):] + [m, t]) if t in stack else f"{m} -> {t}")
            elif t not in state:
                visit(t, stack + [m])
        state[m] = "done"

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_no_module_imports_a_private_name_of_another():
    known = modules()
    wrong = []
    for module, path in known.items():
        for line, target, name in imports(module, path, set(known)):
            if name and name.startswith("_") and not name.startswith("__") and target != module:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {name} from {target}")
        tree = ast.parse(path.read_text())
        aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                   and (n.module or "").startswith("tritoncheck") for a in n.names
                   if f"{n.module}.{a.name}" in known}
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases \
                    and n.attr.startswith("_") and not n.attr.startswith("__"):
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{n.lineno}: {n.value.id}.{n.attr}")
    assert not wrong, "private names used across modules:\n" + "\n".join(wrong)


def test_the_check_finds_what_it_forbids(tmp_path):
    """The walker sees deferred and relative imports (a check that could not fail would prove nothing)."""
    src = tmp_path / "tritoncheck" / "plan" / "x.py"
    src.parent.mkdir(parents=True)
    src.write_text("def f():\n    from ..api import check\n    from . import lower\n    from tritoncheck.report import _fmt\n")
    found = imports("tritoncheck.plan.x", src, {"tritoncheck.plan.lower"})
    assert found == [(2, "tritoncheck.api", "check"), (3, "tritoncheck.plan.lower", None), (4, "tritoncheck.report", "_fmt")]
    assert layer_of("tritoncheck.api") > layer_of("tritoncheck.plan.x")
