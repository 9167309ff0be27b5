"""Which views run: every `View` defined at module level in the modules named by INORDER_VIEWS.

INORDER_VIEWS is a comma-separated list of importable module or package names; when it is unset, the
home's `views.txt` (written by `inorder init --views`) gives them, else the repository's `views` package.
For a package, every module inside it counts. The CLI, the Dagster
code location, rebuild and the executors all take their views from `load_views`, so they see
the same set. A set that cannot run together is refused with one line (`ViewDeclarationError`)
before anything touches the store.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.machinery
import importlib.util
import os
import pkgutil
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from pipelines.store.database import ENGINE_TABLE_NAMES, RESERVED_TABLE_NAMES, Home
from pipelines.store.versions import code_parts, own_modules
from pipelines.view import View

DEFAULT_MODULES = ("views",)
# Dagster asset keys of the engine's own assets: a view of that name would take its key
RESERVED_VIEW_NAMES = frozenset({"event_batches", "errors", "gaps"})


class ViewDeclarationError(ValueError):
    """The views cannot be loaded or cannot run together (the message is one line)."""


@dataclass(frozen=True)
class FoundView:
    view: View
    module: str  # where it is defined at module level
    named: str  # the module of INORDER_VIEWS that brought it in (`module` itself, or a package holding it)


def view_module_names(spec: str | None = None, home: Home | None = None) -> tuple[str, ...]:
    """The module names in `spec`; without one, the home's: INORDER_VIEWS as its settings give it, else its
    views.txt; else the `views` package."""
    if spec is None and home is not None:
        spec = home.settings.views or _recorded(home)
    names = tuple(dict.fromkeys(part.strip() for part in (spec or "").split(",") if part.strip()))
    return names or DEFAULT_MODULES


def _recorded(home: Home) -> str:
    """The view modules the home recorded (`inorder init --views`), their folder on Python's path."""
    folder = recorded_views_folder(home)
    if folder is not None and str(folder) not in sys.path:
        sys.path.append(str(folder))
    return home.recorded_views() or ""


def recorded_views_folder(home: Home) -> Path | None:
    """The folder of the home's recorded view modules, when INORDER_VIEWS does not name others: what a local
    Spark's Python workers need on their path too."""
    return None if home.settings.views else home.recorded_views_folder()


def views_folder_to_record(spec: str) -> Path | None:
    """The folder Python finds the first module of `spec` in, when a new shell's Python path may lack it (it
    came from PYTHONPATH or the current folder, which `inorder init --views` also looks in), else None."""
    top = spec.split(",")[0].strip().split(".")[0]
    found = importlib.util.find_spec(top)
    if found is None and ((Path.cwd() / f"{top}.py").exists() or (Path.cwd() / top / "__init__.py").exists()):
        sys.path.append(str(Path.cwd()))
        found = importlib.util.find_spec(top)
    if found is None or found.origin is None:
        return None  # load_views says why it cannot be imported
    folder = Path(found.origin).parent
    if found.submodule_search_locations:  # a package: the folder that holds it
        folder = folder.parent
    given = {Path(p).resolve() for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p} | {Path.cwd()}
    return folder if folder.resolve() in given and not _found_without(top, given) else None


def _found_without(top: str, folders: set[Path]) -> bool:
    """Whether Python finds module `top` with `folders` off its path (installed, say, as inorder's own are)."""
    path = [p for p in sys.path if p and Path(p).resolve() not in folders]
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        if find is not None and find(top, path if finder is importlib.machinery.PathFinder else None) is not None:
            return True
    return False


def load_views(spec: str | None = None, home: Home | None = None) -> tuple[View, ...]:
    """The views of the modules in `spec` (default: the home's, `view_module_names`), checked to run together.
    Read anew at each call (Python keeps the modules imported): nothing loads them at import."""
    names = view_module_names(spec, home)
    found: dict[int, FoundView] = {}  # a view imported into a second module is the same view, found once
    for name in names:
        for module in _modules(name):
            for f in _views_in(module, name):
                found.setdefault(id(f.view), f)
    if not found:
        raise ViewDeclarationError(f"no View is defined at module level in {', '.join(names)} "
                                   f"(set INORDER_VIEWS to the modules that hold your views)")
    check_views(list(found.values()))
    for f in found.values():  # every module is imported: no handler comes after the fingerprint
        f.view.handlers.seal()
        object.__setattr__(f.view, "module", f.named)  # View is frozen; the store records where it was loaded from
        if f.view.loaded_code is None:  # its module's code as imported (the first load of this process)
            object.__setattr__(f.view, "loaded_code", code_parts(f.view))
    return tuple(f.view for f in found.values())


def _import(name: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the user's code: say which module and why, in one line
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise ViewDeclarationError(f"cannot import view module {name!r}: {type(exc).__name__}: {detail}"
                                   + _not_on_the_path_hint(name, exc)) from exc


def _not_on_the_path_hint(name: str, exc: Exception) -> str:
    """The way forward when the view module itself (not something it imports) is not found: Python looks for it
    on PYTHONPATH, and a new shell may not have the one that worked."""
    if not isinstance(exc, ModuleNotFoundError) or not exc.name or not name.startswith(exc.name):
        return ""
    return (f" (Python finds view modules on PYTHONPATH: export PYTHONPATH=<the folder that holds "
            f"{exc.name.split('.')[0]}>; `inorder init --views {name}`, run there or with that PYTHONPATH, records "
            "the modules and their folder in the home, so that a new shell needs only INORDER_HOME)")


def _modules(name: str) -> list[ModuleType]:
    """The module, or for a package the package and every module inside it (sub-packages included),
    in name order."""
    module = _import(name)
    if not hasattr(module, "__path__"):
        return [module]
    inside = sorted(info.name for info in pkgutil.walk_packages(module.__path__, prefix=f"{name}.",
                                                               onerror=_import))
    return [module, *(_import(sub) for sub in inside)]


def _views_in(module: ModuleType, named: str) -> list[FoundView]:
    return [FoundView(value, module.__name__, named) for value in vars(module).values() if isinstance(value, View)]


def check_views(found: list[FoundView]) -> None:
    """Refuse, with one line, a set of (distinct) views that cannot run side by side in one store."""
    by_name: dict[str, FoundView] = {}
    table_owner: dict[str, FoundView] = {}
    for f in found:
        view = f.view
        if view.name in by_name:
            raise ViewDeclarationError(f"two views are named {view.name!r} ({by_name[view.name].module} and "
                                       f"{f.module}): view names must be unique")
        by_name[view.name] = f
        if view.name in RESERVED_VIEW_NAMES:
            raise ViewDeclarationError(f"view {view.name!r} ({f.module}) takes the name of an engine asset "
                                       f"({', '.join(sorted(RESERVED_VIEW_NAMES))}): rename it")
        for table in view.tables:
            if table.name in RESERVED_TABLE_NAMES:
                what = "an engine table" if table.name in ENGINE_TABLE_NAMES else "a name the engine uses"
                raise ViewDeclarationError(f"view {view.name!r} ({f.module}) declares table {table.name!r}, {what} "
                                           f"(reserved: {', '.join(sorted(RESERVED_TABLE_NAMES))}): rename it")
            if table.name in table_owner:
                other = table_owner[table.name]
                raise ViewDeclarationError(f"views {other.view.name!r} ({other.module}) and {view.name!r} ({f.module}) "
                                           f"both declare table {table.name!r}: a table belongs to one view")
            table_owner[table.name] = f


class UnknownView(LookupError):
    """A command named a view that is not among the loaded ones."""


def view_named(views: tuple[View, ...] | list[View], name: str) -> View:
    for view in views:
        if view.name == name:
            return view
    known = [v.name for v in views]
    close = difflib.get_close_matches(name, known, n=1)
    raise UnknownView(f"no view named {name!r}" + (f"; did you mean {close[0]!r}?" if close else "")
                      + f" (known: {', '.join(known)})")


def module_sources(spec: str | None = None, home: Home | None = None) -> list[Path]:
    """The files or package folders that hold the views' code (what executors need beside `pipelines/`): the
    top-level package or file of every view module and of every module of the author's own that decides a
    view's rows (`own_modules`, what the fingerprint reads; a flat `carrier_rules.py` beside
    `carrier_views.py` too). For `shop.views`, the whole package `shop`. Everything a view runs is shipped
    with the code, so an edit anywhere in it is new code for the executors (pipelines/spark/session.py)."""
    return top_level_sources([*view_module_names(spec, home),
                              *(name for view in load_views(spec, home) for name in own_modules(view))])


def top_level_sources(names) -> list[Path]:
    """The top-level package folder (or single file) of each module name, once each."""
    sources: dict[Path, None] = {}
    for top in dict.fromkeys(name.split(".")[0] for name in names):
        path = Path(_import(top).__file__).resolve()
        sources[path.parent if path.name == "__init__.py" else path] = None
    return list(sources)
