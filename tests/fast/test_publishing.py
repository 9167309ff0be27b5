"""The PostgreSQL publication's edges that need no server (pipelines/serve/publish.py): where it publishes from the
settings, how positions are told, and `Publishing` when publishing is off or PostgreSQL cannot be reached
(DuckDB stays committed, the error is said once and kept, nothing more is tried). With a server:
tests/engine/test_publish.py."""

from __future__ import annotations

import pytest

from pipelines.config import Settings
from pipelines.serve.publish import (Position, Positions, Publication, Publishing, ServeTarget, describe,
                                     format_positions, read_positions)
from pipelines.store.database import Store
from tests.domains import SHOP_VIEWS
from tests.harness import fresh_home

DOWN = "host=127.0.0.1 port=1 dbname=inorder user=inorder connect_timeout=2"  # nothing listens on port 1


def test_the_target_is_read_from_the_settings_and_a_schema_that_is_no_identifier_is_refused():
    assert ServeTarget.of(Settings()) is None
    assert ServeTarget.of(Settings(serve_postgres=DOWN)) == ServeTarget(DOWN, "public")
    target = ServeTarget.of(Settings(serve_postgres=DOWN, serve_schema="read_side"))
    assert target == ServeTarget(DOWN, "read_side") and target.qualified("orders") == '"read_side"."orders"'
    with pytest.raises(ValueError) as refused:
        ServeTarget.of(Settings(serve_postgres=DOWN, serve_schema='x"; DROP TABLE y; --'))
    assert str(refused.value) == """INORDER_SERVE_SCHEMA 'x"; DROP TABLE y; --' is not a valid name (lower-case \
letters, digits, _)"""


def test_positions_say_which_views_are_behind_and_by_how_many_entries():
    current, behind, never = Position("orders", 7, 7, 0), Position("customers", 9, 4, 3), Position("items", 2, None, 2)
    positions = Positions(True, (current, behind, never))
    assert positions.of("customers") is behind and positions.of("payments") is None
    assert positions.behind == [behind, never] and current.current and not never.current
    assert format_positions(positions.entries) == [
        "orders: published to PostgreSQL up to entry 7, current",
        "customers: published to PostgreSQL up to entry 4, 3 entries behind DuckDB (entry 9)",
        "items: published to PostgreSQL up to entry -, 2 entries behind DuckDB (entry 2)"]


def test_publications_are_described_in_one_line():
    assert describe([Publication("orders", 4, "b4", "delta", 12, 0.5), Publication("customers", 4, "b4", "full", 0,
                                                                                     1.234)]) == (
        "orders to entry 4 (delta, 12 rows, 0.50s); customers to entry 4 (full, 0 rows, 1.23s)")


def test_nothing_is_published_or_said_when_publishing_is_not_configured(tmp_path):
    said: list[str] = []
    publishing = Publishing(said.append, None)
    assert not publishing.active
    with Store.open(fresh_home(tmp_path), SHOP_VIEWS) as store:
        publishing.publish(store.con, SHOP_VIEWS)
        assert read_positions(store.con, SHOP_VIEWS, Settings()) == Positions(configured=False)
    assert (said, publishing.error, publishing.publications) == ([], None, [])


def test_an_unreachable_postgres_is_said_once_kept_and_not_tried_again_while_duckdb_stays_committed(tmp_path):
    said: list[str] = []
    publishing = Publishing(said.append, ServeTarget(DOWN))
    with Store.open(fresh_home(tmp_path), SHOP_VIEWS) as store:
        assert publishing.active
        publishing.publish(store.con, SHOP_VIEWS)
        assert not publishing.active
        (line,) = said
        assert line.startswith("publishing to PostgreSQL failed: "
                               "cannot connect to PostgreSQL (INORDER_SERVE_POSTGRES): ")
        assert line.endswith("; DuckDB is committed, and the next run or `inorder publish` catches up")
        assert publishing.error == line[len("publishing to PostgreSQL failed: "):line.index("; DuckDB is committed")]
        assert "\n" not in line and "  " not in line and publishing.seconds > 0
        assert 'to server at "127.0.0.1", port 1 failed: Connection refused' in line  # psycopg's reason, on one line
        publishing.publish(store.con, SHOP_VIEWS)  # not tried again in this projection
        assert len(said) == 1 and publishing.publications == []
        positions = read_positions(store.con, SHOP_VIEWS, Settings(serve_postgres=DOWN))
        assert positions.configured and positions.entries == ()
        assert positions.error.startswith("cannot connect to PostgreSQL (INORDER_SERVE_POSTGRES): ")
