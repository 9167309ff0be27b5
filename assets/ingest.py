"""`event_batches`: materialising a partition inspects and archives that batch file (idempotent)."""

import dagster as dg
import pyarrow.compute as pc
import pyarrow.parquet as pq

from assets.partitions import BATCHES, STORE_POOL, run_time
from pipelines.ingest import archive_path
from pipelines.registry import load_views
from pipelines.run import ingest_batch
from resources import FoldersResource, ReadStoreResource, inorder_home

ALL_VIEWS = load_views()  # INORDER_VIEWS, read when the code location loads


@dg.asset(partitions_def=BATCHES, pool=STORE_POOL, group_name="ingest", kinds={"duckdb", "parquet"},
          description="A landing batch, normalised and archived as Parquet (entry of the ingest log). "
                      "A file that cannot be read fails its partition, with the reason.")
def event_batches(context: dg.AssetExecutionContext, read_store: ReadStoreResource,
                  folders: FoldersResource) -> dg.MaterializeResult:
    home = inorder_home(read_store, folders)
    result = ingest_batch(home, ALL_VIEWS, context.partition_key, run_time(context))
    metadata = {
        "status": dg.MetadataValue.text(result.status),
        "entry_idx": dg.MetadataValue.int(result.entry_idx),
        "records": dg.MetadataValue.int(result.records),
        "malformed": dg.MetadataValue.int(result.malformed),
        "bytes": dg.MetadataValue.int(result.bytes),
        "already_ingested": dg.MetadataValue.bool(result.already_ingested),
    }
    if result.status == "rejected":  # the partition shows as failed, with its reason, never as a green batch
        metadata["rejected_reason"] = dg.MetadataValue.text(result.reason or "")
        raise dg.Failure(description=f"batch {context.partition_key} was rejected: {result.reason}",
                         metadata=metadata, allow_retries=False)
    else:
        messages = pq.read_table(archive_path(home, result.entry_idx), columns=["stream_id", "seq"])
        metadata["streams"] = dg.MetadataValue.int(len(pc.unique(messages["stream_id"])))
        if messages.num_rows:
            low, high = pc.min_max(messages["seq"]).values()
            metadata["seq_range"] = dg.MetadataValue.text(f"{low.as_py()}..{high.as_py()}")
    return dg.MaterializeResult(metadata=metadata)
