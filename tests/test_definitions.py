"""The Dagster code location loads."""

from __future__ import annotations


def test_definitions_load():
    from inorder.definitions import defs

    assert defs.resolve_all_asset_keys() is not None
