"""`tritoncheck scan --engine ray`: the local scan's work on each shard, run as Ray Data tasks.

Why the Ray dataset holds the shards and not their rows (`ray.data.read_parquet`): Ray's readers
split and merge files into blocks that carry no row index, so a row's global index would depend on
how the blocks were scheduled. Here each item is one shard with its first global row (from the file
metadata, in sorted path order, on the driver); a task reads its shard with pyarrow and runs
`ShardJob.run` on it, exactly what the local engine runs (on the compiled C kernel where the
worker has a compiler: `auto`), writes its bad rows, and returns its findings as one JSON row. The
driver puts the parts back in shard order, so the report never depends on which task ran first.

Ray is an optional extra. Without it, `--engine ray` is a usage error naming the extra.
RAY_ADDRESS (or an earlier `ray.init(address=...)`) picks a running cluster; otherwise Ray starts
a local one. On a cluster, DATA and --bad-rows must be paths that every worker can reach.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tritoncheck.cli.commands import UsageError, one_line

if TYPE_CHECKING:
    from tritoncheck.scanning.engine import ShardJob

MISSING_RAY = "--engine ray needs Ray Data: pip install 'tritoncheck[ray]'"


def run_shards(job: ShardJob, advance: Callable[[int], None], logs: bool = False) -> list[dict[str, Any]]:
    """`job.run` on every shard of `job`, one Ray Data task per shard; the parts in shard order.
    Ray's own logs and progress bars only with `logs` (the scan has its own progress)."""
    try:
        import ray
        import ray.data
    except ImportError:
        raise UsageError(MISSING_RAY) from None
    if not job.shards:
        return []
    if not ray.is_initialized():  # as Ray Data would, but a cluster that cannot be reached is the user's to fix
        level = logging.INFO if logs else logging.ERROR
        try:
            with _level(logging.getLogger("ray"), level):  # (its start-up lines: "Started a local Ray instance")
                ray.init(logging_level=level, log_to_driver=logs)
        except Exception as exc:  # ConnectionError, RuntimeError, ValueError: by cause
            raise UsageError(f"--engine ray: cannot start or reach Ray: {one_line(exc)}") from None
    items = [{"index": s.index} for s in job.shards]

    def scan_shards(batch: dict[str, Any]) -> dict[str, Any]:
        shards = [job.shards[int(i)] for i in batch["index"]]  # (the job travels with the task, its shards too)
        return {"index": [s.index for s in shards], "part": [json.dumps(job.run(s)) for s in shards]}

    # one block per shard, so that shards are spread over the workers and not taken in runs by one task
    ds = ray.data.from_items(items, override_num_blocks=len(items)).map_batches(scan_shards, batch_size=1)
    parts: dict[int, dict[str, Any]] = {}
    with contextlib.nullcontext() if logs else _quiet(ray.data.DataContext.get_current()):
        for row in ds.iter_rows():
            index = int(row["index"])
            parts[index] = json.loads(row["part"])
            advance(job.shards[index].rows)
    return [parts[s.index] for s in job.shards]


@contextlib.contextmanager
def _quiet(context: Any) -> Iterator[None]:
    """Ray Data's progress bars and INFO lines off while the scan runs (it has its own progress), then as they were."""
    bars = context.enable_progress_bars
    context.enable_progress_bars = False
    try:
        with _level(logging.getLogger("ray.data"), logging.WARNING):
            yield
    finally:
        context.enable_progress_bars = bars


@contextlib.contextmanager
def _level(logger: logging.Logger, level: int) -> Iterator[None]:
    """`logger` at `level` for the block, then as it was."""
    was = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(was)
