"""Where things live (issue 25 item 7, issue 34 item 5, docs/ARCHITECTURE.md): `bench/` stands on its own,
importing nothing from `tests/`, and the tests import nothing from `bench/` but the few that test it or run
its inputs; the demos' generators live in `demos/`, outside the packages the registry scans for views
(`views`, `shop`), which hold no generator."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported(path: Path) -> set[str]:
    """The modules `path` imports, at module level or inside functions."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
        elif isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
    return found


def test_bench_imports_nothing_from_tests():
    offenders = {str(path.relative_to(ROOT)): sorted(name for name in imported(path) if name.split(".")[0] == "tests")
                 for path in sorted((ROOT / "bench").rglob("*.py"))}
    assert {path: names for path, names in offenders.items() if names} == {}


# the test modules that import `bench`, and why
BENCH_IMPORTERS = {
    "tests/e2e/test_state_peer.py": "tests the Spark peer, the suite's case 8",
    "tests/e2e/test_cluster.py": "the wide pass on the cluster, over the side-by-side study's wide inputs",
    "tests/e2e/test_rebuild_readers.py": "a rebuild under a reader on the 1M bank store the freshness case caches",
}


def test_the_tests_import_nothing_from_bench_but_its_own_tests():
    importers = {str(path.relative_to(ROOT)) for path in sorted((ROOT / "tests").rglob("*.py"))
                 if any(name.split(".")[0] == "bench" for name in imported(path))}
    assert importers == set(BENCH_IMPORTERS)


def test_the_demos_generators_live_outside_the_view_packages():
    import demos.bank
    import demos.shop
    from inorder.cli import GENERATORS

    assert GENERATORS == {"bank": "demos.bank", "shop": "demos.shop"}
    assert callable(demos.bank.generate) and callable(demos.shop.generate)
    scanned = [path for package in ("views", "shop") for path in (ROOT / package).rglob("*.py")]
    assert scanned and not [str(p.relative_to(ROOT)) for p in scanned if "generat" in p.name]
    assert not [str(p.relative_to(ROOT)) for p in scanned if {"demos.bank", "demos.shop"} & imported(p)]
