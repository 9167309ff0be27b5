"""The demo domains' views, loaded the way INORDER_VIEWS loads a user's (pipelines/registry.py)."""

from __future__ import annotations

from pipelines.registry import load_views

BANK_VIEWS = load_views("views")
SHOP_VIEWS = load_views("shop.views")
