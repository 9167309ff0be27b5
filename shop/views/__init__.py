"""The shop's projections, one module per view, found by pipelines/registry.py when
INORDER_VIEWS=shop.views (nothing is listed by hand):

- `orders` (keyed, stream type `order`, parks a stream on a refused message),
- `order_items` (append, `order`),
- `customers` (keyed, `customer`),
- `shop_daily` (aggregate plus per-stream keyed state, subscribes to `order` AND `customer`).

`events` holds the event types (msgspec Structs, the constraints on their fields); `fields` the
order lifecycle rules the views share and the checks the types cannot express.
"""
