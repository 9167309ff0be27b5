"""The online shop demo: a second domain written the way a user writes their own views.

Its views live in `shop.views` (run them with `INORDER_VIEWS=shop.views`); `demos.shop`
writes demo batches with the trouble real feeds have.
"""
