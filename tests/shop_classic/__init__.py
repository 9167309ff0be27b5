"""The shop's views as they were before the typed-event rewrite (issue 26), frozen: copies of
shop/views/ at commit 5ff4213 with only their imports changed. tests/fast/test_shop_typed.py replays random
payloads through these and through shop/views/ and asserts the same tables and refusals.
Never edit them to follow the shop: they are the reference its behaviour is held to."""
