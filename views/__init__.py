"""The projections. Each module declares one `VIEW`; `ALL_VIEWS` is what the engine runs."""

from __future__ import annotations

from pipelines.view import View
from views import account_activity, accounts, daily_totals

ALL_VIEWS: tuple[View, ...] = (accounts.VIEW, account_activity.VIEW, daily_totals.VIEW)


def view_named(name: str) -> View:
    for view in ALL_VIEWS:
        if view.name == name:
            return view
    raise KeyError(f"no view named {name!r} (known: {', '.join(v.name for v in ALL_VIEWS)})")
