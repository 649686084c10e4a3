"""Every reference the documentation makes resolves: a module, function or class named in a
docstring, a comment or a Markdown page (``fsmooth.dps.hoist``, ``shape.size_printer.print_size``) exists, and
every repository path it names (``clib/fsmooth_scalar.h``, ``docs/ARCHITECTURE.md``) is a file."""
from __future__ import annotations

import importlib
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
STAGES = ("shape", "dps", "dpia", "clib")
SOURCES = sorted(p for folder in ("fsmooth", *STAGES, "benchmarks", "tests") for p in (ROOT / folder).rglob("*.py"))
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), ROOT / "benchmarks" / "RESULTS.md",
                *(ROOT / "examples").rglob("*.md")])

# A dotted name in double backquotes (reST) or single backquotes (Markdown) that starts at one of
# fsmooth's packages; a stage may be named by its folder (``dps.hoist``) or as installed.
DOTTED = re.compile(rf"``?((?:fsmooth|{'|'.join(STAGES)})(?:\.[A-Za-z_][A-Za-z0-9_]*)+)``?")
PATH = re.compile(rf"\b((?:fsmooth|{'|'.join(STAGES)}|tests|benchmarks|examples|docs)/[A-Za-z0-9_./-]*[A-Za-z0-9_]\.(?:py|h|md|sh|c|json))\b")


def resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] in STAGES:
        parts = ["fsmooth", *parts]
    for split in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for attribute in parts[split:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def references(path: pathlib.Path, pattern: re.Pattern) -> set[str]:
    return set(pattern.findall(path.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", SOURCES + PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_modules_and_objects_exist(path):
    missing = sorted(d for d in references(path, DOTTED) if not resolves(d))
    assert not missing, f"{path.relative_to(ROOT)} names what does not exist: {missing}"


@pytest.mark.parametrize("path", SOURCES + PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_exist(path):
    missing = sorted(f for f in references(path, PATH) if not (ROOT / f).exists() and not (path.parent / f).exists())
    assert not missing, f"{path.relative_to(ROOT)} names files that do not exist: {missing}"


def test_no_reference_to_a_design_document_outside_the_repository():
    stray = [str(p.relative_to(ROOT)) for p in SOURCES + PAGES
             if p != pathlib.Path(__file__) and "DESIGN.md" in p.read_text(encoding="utf-8")]
    assert not stray, f"these point at a DESIGN.md that is not in the repository: {stray}"


def test_the_readme_lists_every_top_level_folder():
    where = ROOT.joinpath("README.md").read_text(encoding="utf-8").split("## Where things are", 1)[1]
    folders = {p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
               and p.name not in ("build", "dist") and not p.name.endswith(".egg-info")}
    listed = set(re.findall(r"^\| `([a-z_]+)/`", where, re.M))
    assert listed == folders, (sorted(listed - folders), sorted(folders - listed))
