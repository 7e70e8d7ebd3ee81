"""The house: facts that must live in two places because stages/ (torch) and cluster/ (no torch) never import each other:
the copies agree. Everywhere else the farm imports the one home (cluster.workload for stage names, units and the
frame rate; farm.raycluster.resource_name for a card's Ray resource)."""
from __future__ import annotations

import pathlib
import re

import pytest

from cluster.workload import AR_STAGES, FRAMES_PER_SECOND, STAGE_UNITS, STAGES
from stages import song
from stages.config import from_toml

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_stage_names_agree():
    assert song.STAGES == STAGES and set(STAGE_UNITS) == set(STAGES) and AR_STAGES == STAGES[:2]


def test_the_planner_knows_the_engines_formats():
    """cluster/ counts bytes for exactly the AR weight and KV formats the engines run (the rooms never import each
    other, so each keeps its own list)."""
    from cluster.workload import AR_FORMAT_BYTES, KV_FORMAT_BYTES
    from stages.kv_cache import KV_FORMATS
    from stages.quant import FORMATS

    assert tuple(AR_FORMAT_BYTES) == tuple(FORMATS) and tuple(KV_FORMAT_BYTES) == tuple(KV_FORMATS)


@pytest.mark.parametrize("name", ["tiny", "yue2-3b"])
def test_the_frame_rate_is_the_vae_hop(name):
    vae = from_toml(ROOT / "configs" / "models" / f"{name}.toml").vae
    assert vae.sample_rate / vae.hop == FRAMES_PER_SECOND


def test_no_module_spells_a_shared_fact_again():
    """The stage tuple, the frame rate and the card resource are written once per room; a new copy fails here."""
    allowed = {"stage tuple": {"cluster/workload.py", "stages/song.py"},
               "frame rate": {"cluster/workload.py"},
               "card resource": {"farm/raycluster.py"}}
    patterns = {"stage tuple": re.compile(r'"plan",\s*"semantic",\s*"acoustic",\s*"decode"'),
                "frame rate": re.compile(r"[*/]\s*25(\.0)?\b"),      # seconds <-> frames by hand
                "card resource": re.compile(r'f"farm_(gpu|cpu)_')}
    found: dict[str, set[str]] = {fact: set() for fact in patterns}
    for room in ("farm", "cluster", "stages"):
        for path in (ROOT / room).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for fact, pattern in patterns.items():
                if pattern.search(text):
                    found[fact].add(str(path.relative_to(ROOT)))
    for fact, where in found.items():
        assert where <= allowed[fact], (fact, sorted(where - allowed[fact]))


def _imports() -> dict[str, set[str]]:
    """Module → the project modules it imports anywhere in its body (deferred imports included)."""
    import ast

    mods = {}
    for room in ("farm", "cluster", "stages"):
        for path in (ROOT / room).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = path
    graph = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
                target = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    full = f"{target}.{alias.name}"
                    graph[name].add(full if full in mods else target)
            elif isinstance(node, ast.Import):
                graph[name].update(alias.name for alias in node.names)
    return {m: {t for t in targets if t in mods and t != m} for m, targets in graph.items()}


def _cycle_through(graph: dict[str, set[str]], start: str) -> bool:
    seen, todo = set(), list(graph[start])
    while todo:
        node = todo.pop()
        if node == start:
            return True
        if node not in seen:
            seen.add(node)
            todo.extend(graph.get(node, ()))
    return False


def test_no_module_imports_another_in_a_cycle_and_the_doors_open_one_way():
    assert _cycle_through({"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a")           # the check can fail
    assert not _cycle_through({"a": {"b"}, "b": {"c"}, "c": set()}, "a")
    graph = _imports()
    assert [m for m in graph if _cycle_through(graph, m)] == []
    for module, targets in graph.items():
        room = module.split(".")[0]
        others = {t.split(".")[0] for t in targets} - {room}
        assert not (room in ("stages", "cluster") and others), (module, others)   # stages and cluster stand alone


def test_a_flag_name_means_one_thing_in_every_command():
    """`--format` always names an AR weight format (`--output` is how `plan` and `simulate` print), and a flag that
    takes a value in one command (a path, a choice) is never a bare switch in another; short names too."""
    import typer

    from farm.cli import app

    switch: dict[str, set[bool]] = {}

    def walk(command, path):
        for param in command.params:
            if getattr(param, "param_type_name", "") != "option":
                continue
            for flag in param.opts:
                switch.setdefault(flag, set()).add(bool(param.is_flag))
                if flag == "--format":
                    assert "fp8" in (param.help or ""), (path, param.help)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(app), "farm")
    assert len(switch) > 30 and {"--format", "--output", "--json", "--force"} <= set(switch)
    assert {flag: kinds for flag, kinds in switch.items() if len(kinds) > 1} == {}
