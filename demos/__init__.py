"""The demos' generators: batches of events, with the trouble real feeds have, for the bank views
(`views/`, `demos.bank`) and the online shop's (`shop/views/`, `demos.shop`). Outside the packages
the registry scans for views (INORDER_VIEWS), and never shipped to executors."""
