"""One dynamic partition of `event_batches` per batch file of the landing folder."""

import dagster as dg

BATCHES = dg.DynamicPartitionsDefinition(name="event_batches")
