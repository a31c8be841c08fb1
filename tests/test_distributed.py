"""Two ranks on gloo: a batch bad on one rank only stops both, and neither hangs."""

import datetime
import json
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import tritoncheck as tc

TIMEOUT_S = 120


def _spec():
    return tc.load_spec("cross-entropy")


def _rank_main(rank: int, world: int, init_file: str, out_dir: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    result = {"rank": rank}
    try:
        target = torch.tensor([0, 1, 2, 1])
        if rank == 0:
            target[2] = 9  # only rank 0's batch is bad
        batch = {"input": torch.randn(4, 3), "target": target}
        try:
            tc.validate(batch, _spec(), group=True)
            result["raised"] = None
        except tc.BatchValidationError as exc:
            result["raised"] = sorted(exc.report.codes)
            result["value"] = exc.report.violations[0].value
        dist.barrier()  # both ranks reach the next collective: nobody is left waiting
        result["after_barrier"] = True
    finally:
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(result, f)
        dist.destroy_process_group()


@pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available")
def test_both_ranks_raise_when_one_rank_is_bad(tmp_path):
    ctx = mp.start_processes(_rank_main, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"ranks still running after {TIMEOUT_S}s: validate hung")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    results = {r: json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)}
    assert results[0]["raised"] == ["above_max"] and results[0]["value"] == 9
    assert results[1]["raised"] == ["rank_failed"] and results[1]["value"] == [0]
    assert all(r["after_barrier"] for r in results.values())


def test_group_without_a_process_group_says_how_to_set_one_up():
    batch = {"input": torch.randn(4, 3), "target": torch.tensor([0, 1, 2, 1])}
    for deferred in (False, True):
        with pytest.raises(RuntimeError, match=r"torch\.distributed\.init_process_group"):
            tc.validate(batch, _spec(), group=True, deferred=deferred)
