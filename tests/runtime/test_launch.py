"""Tests of dpsim.runtime.launch: real process groups, failures, timeouts, no leftovers."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist

from dpsim.runtime.launch import (
    LaunchTimeoutError,
    RankFailedError,
    choose_backend,
    free_port,
    last_pids,
    launch,
)
from dpsim.runtime.launch import job as launch_job
from dpsim.runtime.launch import ports as launch_ports
from dpsim.runtime.launch import rank as launch_rank

try:
    import psutil
except ImportError:  # pragma: no cover - psutil comes with ipykernel
    psutil = None


# --------------------------------------------------------------------------- helpers


def _alive(pid: int) -> bool:
    """True if `pid` runs and is not a zombie."""
    if psutil is not None:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False
    return launch_rank._alive(pid)


def _spawned_descendants() -> list[int]:
    """Live rank processes (multiprocess spawn children) below this test process."""
    found = []
    if psutil is not None:
        for child in psutil.Process().children(recursive=True):
            try:
                cmd = " ".join(child.cmdline())
                zombie = child.status() == psutil.STATUS_ZOMBIE
            except psutil.NoSuchProcess:
                continue
            if "spawn_main" in cmd and not zombie:
                found.append(child.pid)
        return found
    me = os.getpid()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me and "spawn_main" in cmd and _alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _assert_no_ranks_left(pids: list[int]) -> None:
    assert pids, "launch should expose the pids of its ranks"
    left = [pid for pid in pids if _alive(pid)]
    assert not left, f"rank processes left behind: {left}"
    assert not _spawned_descendants(), "spawned processes left behind"


def _all_reduce_info(rank: int, world_size: int, base: float, *, scale: float) -> dict[str, Any]:
    t = torch.tensor([base + rank]) * scale
    dist.all_reduce(t)
    return {
        "sum": t.item(),
        "backend": dist.get_backend(),
        "world": dist.get_world_size(),
        "ifname": os.environ.get("GLOO_SOCKET_IFNAME"),
        "extra": os.environ.get("DPSIM_TEST_VAR"),
        "rank_env": os.environ.get("RANK"),
    }


def _mark(directory: str, name: str) -> None:
    """Record in `directory/name` the wall-clock time at which a rank got here."""
    Path(directory, name).write_text(repr(time.time()))


def _marked_at(directory: Path, name: str) -> float:
    return float((directory / name).read_text())


def _raise_on_rank_1(rank: int, world_size: int, directory: str) -> int:
    if rank == 1:
        _mark(directory, "failed")
        raise ValueError("boom from rank 1")
    dist.barrier()  # rank 0 waits in a collective its peer never joins
    return rank


def _die_on_rank_1(rank: int, world_size: int, how: str, directory: str) -> int:
    if rank == 1:
        time.sleep(0.2)
        _mark(directory, "failed")
        if how == "sigkill":
            os.kill(os.getpid(), signal.SIGKILL)
        os._exit(7)
    t = torch.ones(1)
    dist.all_reduce(t)
    return rank


def _sleep_forever(seconds: float = 1e9) -> None:
    time.sleep(seconds)


def _hang_on_rank_1(rank: int, world_size: int, directory: str) -> int:
    _mark(directory, f"started{rank}")
    if rank == 1:
        _sleep_forever()
    dist.all_reduce(torch.ones(1))
    return rank


class _SlowToLoadOnRank1:
    """An argument whose unpickling never ends on rank 1: that rank never joins the group."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_load_slowly_on_rank_1, ())


def _load_slowly_on_rank_1() -> None:
    if os.environ.get("RANK") == "1":
        _sleep_forever()


def _return_rank(rank: int, world_size: int, _unused: Any) -> int:
    return rank


def _recv_never_sent(rank: int, world_size: int) -> int:
    if rank == 1:
        dist.recv(torch.zeros(2), 0)  # rank 0 returns without sending
    return rank


def _slow_rank_0(rank: int, world_size: int, seconds: float) -> float:
    if rank == 0:  # computes while rank 1 waits in the all_reduce: slow, not stuck
        x = torch.randn(200, 200)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            x = (x @ x).tanh()
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()


def _size_mismatch(rank: int, world_size: int) -> int:
    if rank == 0:
        dist.send(torch.ones(3), 1)
    else:
        dist.recv(torch.zeros(2), 0)  # gloo aborts the process: 12 bytes vs 8
    return rank


# --------------------------------------------------------------------------- success


@pytest.mark.slow
def test_lambda_results_come_back_by_rank() -> None:
    assert launch(lambda r, w: (r, w), 2) == [(0, 2), (1, 2)]
    _assert_no_ranks_left(last_pids())
    assert len(last_pids()) == 2


@pytest.mark.slow
def test_module_function_all_reduce_with_args_kwargs_env() -> None:
    out = launch(_all_reduce_info, 2, args=(1.0,), kwargs={"scale": 2.0},
                 env={"DPSIM_TEST_VAR": "x"}, backend="gloo")
    # (1 + 0) * 2 + (1 + 1) * 2 = 6 on every rank
    assert [o["sum"] for o in out] == [6.0, 6.0]
    assert {o["backend"] for o in out} == {"gloo"}
    assert {o["world"] for o in out} == {2}
    assert [o["rank_env"] for o in out] == ["0", "1"]
    assert {o["extra"] for o in out} == {"x"}
    assert {o["ifname"] for o in out} == {launch_ports.loopback_ifname()}
    _assert_no_ranks_left(last_pids())


@pytest.mark.slow
def test_closure_on_one_rank_prints_and_uses_dataloader_workers(capfd: pytest.CaptureFixture[str]
                                                        ) -> None:
    offset = 5

    def fn(rank: int, world_size: int) -> tuple[torch.Tensor, list[int]]:
        from torch.utils.data import DataLoader

        print(f"hello from rank {rank} of {world_size}")
        # Ranks are not daemonic, so they may start DataLoader workers.
        batches = [int(b.sum()) for b in DataLoader(list(range(4)), batch_size=2,  # type: ignore[arg-type]
                                                        num_workers=2)]
        return torch.arange(3) + offset, batches

    ((tensor, batches),) = launch(fn, 1)
    assert torch.equal(tensor, torch.arange(3) + 5)
    assert batches == [1, 5]
    assert "hello from rank 0 of 1" in capfd.readouterr().out
    _assert_no_ranks_left(last_pids())


@pytest.mark.slow
def test_user_env_keeps_its_gloo_ifname() -> None:
    ifname = launch_ports.loopback_ifname()
    if ifname is None:
        pytest.skip("no loopback interface name on this platform")
    got = launch(lambda r, w: os.environ["GLOO_SOCKET_IFNAME"], 1,
                 env={"GLOO_SOCKET_IFNAME": ifname, "OMP_NUM_THREADS": "1"})
    assert got == [ifname]


@pytest.mark.slow
def test_two_concurrent_launches_both_succeed() -> None:
    outs: dict[int, Any] = {}
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            outs[i] = launch(_all_reduce_info, 2, args=(float(i),), kwargs={"scale": 1.0})
        except BaseException as exc:  # collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in (10, 20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(150)
    assert not errors, errors
    assert [o["sum"] for o in outs[10]] == [21.0, 21.0]
    assert [o["sum"] for o in outs[20]] == [41.0, 41.0]
    assert not _spawned_descendants()


# --------------------------------------------------------------------------- failures


# Reaction times are measured from the moment the rank failed (start-up on a loaded 2-core
# machine can take several seconds and is not what these tests are about).
# The bounds below only catch a hang; the speed goal (<= 2 s) is measured in
# benchmarks/launch.py.


@pytest.mark.slow
def test_rank_that_raises_is_reported_fast(tmp_path: Path) -> None:
    with pytest.raises(RankFailedError) as info:
        launch(_raise_on_rank_1, 2, args=(str(tmp_path),), timeout_s=60)
    elapsed = time.time() - _marked_at(tmp_path, "failed")
    err = info.value
    assert elapsed < 10, f"took {elapsed:.1f} s after the rank raised"
    assert isinstance(err, RuntimeError)
    assert err.rank == 1
    assert err.exc_type == "ValueError"
    assert str(err).startswith("rank 1 failed:")
    assert "ValueError: boom from rank 1" in err.traceback
    assert "_raise_on_rank_1" in str(err)
    _assert_no_ranks_left(err.pids)


@pytest.mark.slow
@pytest.mark.parametrize(("how", "exitcode", "words"),
                         [("sigkill", -9, "SIGKILL"), ("exit", 7, "code 7")])
def test_killed_rank_is_reported_fast(tmp_path: Path, how: str, exitcode: int, words: str
                                      ) -> None:
    with pytest.raises(RankFailedError) as info:
        launch(_die_on_rank_1, 2, args=(how, str(tmp_path)), timeout_s=60)
    elapsed = time.time() - _marked_at(tmp_path, "failed")
    err = info.value
    assert elapsed < 10, f"took {elapsed:.1f} s after the rank died"
    assert err.rank == 1
    assert err.exitcode == exitcode
    assert str(err).startswith("rank 1 failed:")
    assert words in str(err)
    _assert_no_ranks_left(err.pids)


@pytest.mark.slow
def test_hanging_ranks_time_out_with_their_stacks(tmp_path: Path) -> None:
    timeout_s = 7.0
    start = time.monotonic()
    with pytest.raises(LaunchTimeoutError) as info:
        launch(_hang_on_rank_1, 2, args=(str(tmp_path),), timeout_s=timeout_s)
    elapsed = time.monotonic() - start
    err = info.value
    assert timeout_s <= elapsed < timeout_s + 5, f"took {elapsed:.1f} s"
    assert isinstance(err, TimeoutError)
    assert err.ranks == [0, 1]
    assert "ranks 0, 1 did not finish" in str(err)
    both_started = all((tmp_path / f"started{r}").exists() for r in (0, 1))
    if hasattr(signal, "SIGUSR1") and both_started:  # else start-up alone outlasted timeout_s
        assert "all_reduce" in err.stacks.get(0, "")
        assert "_sleep_forever" in err.stacks.get(1, "")
        assert err.states[0].startswith(
            "in a collective: blocked in all_reduce (torch.distributed), called from "
            "_hang_on_rank_1 (test_launch.py, line ")
        assert err.states[1].startswith("running Python code in _sleep_forever (test_launch.py")
        assert "called from fn _hang_on_rank_1" in err.states[1]
        assert f"rank 0: {err.states[0]}" in str(err)
        assert f"rank 1: {err.states[1]}" in str(err)
    _assert_no_ranks_left(err.pids)


@pytest.mark.slow
def test_deadlock_is_reported_within_seconds() -> None:
    from dpsim.runtime.launch import DeadlockError

    start = time.monotonic()
    with pytest.raises(DeadlockError) as info:
        launch(_recv_never_sent, 2, backend="gloo", timeout_s=60)
    elapsed = time.monotonic() - start
    err = info.value
    assert elapsed < 10, f"took {elapsed:.1f} s"
    assert isinstance(err, LaunchTimeoutError)
    assert err.ranks == [1]
    assert err.finished == [0]
    assert err.states[1].startswith("waits for a message rank 0 never sent (rank 0 finished fn)")
    assert "at _recv_never_sent (test_launch.py, line " in err.states[1]
    assert "`dist.recv(torch.zeros(2), 0)" in str(err)
    _assert_no_ranks_left(err.pids)


@pytest.mark.slow
def test_a_rank_that_computes_while_others_wait_is_not_a_deadlock() -> None:
    assert launch(_slow_rank_0, 2, args=(6.0,), backend="gloo", timeout_s=60) == [2.0, 2.0]


@pytest.mark.slow
def test_a_rank_killed_by_gloo_shows_gloos_message() -> None:
    with pytest.raises(RankFailedError) as info:
        launch(_size_mismatch, 2, backend="gloo", timeout_s=60)
    err = info.value
    assert err.rank == 1
    assert err.exitcode == -signal.SIGABRT
    assert "Received data size doesn't match expected size" in err.summary
    assert "terminate called after throwing" in str(err)
    _assert_no_ranks_left(err.pids)


@pytest.mark.slow
def test_timeout_says_which_rank_never_joined() -> None:
    with pytest.raises(LaunchTimeoutError) as info:
        launch(_return_rank, 2, args=(_SlowToLoadOnRank1(),), timeout_s=12)
    err = info.value
    assert err.ranks == [0, 1]
    assert err.states[1].startswith("still starting: it never joined the process group")
    assert err.states[0].startswith("still starting")  # waits for rank 1, or slow itself
    if "joined the process group and waits" in err.states[0]:
        assert "waits for rank(s) 1 to join; fn has not started" in err.states[0]
    assert "rank 1: still starting" in str(err)
    assert "raise timeout_s" in str(err)
    _assert_no_ranks_left(err.pids)


@pytest.mark.slow
def test_traceback_shows_lines_of_code_without_a_file() -> None:
    """Like a notebook cell: the source lives only in this process's linecache."""
    import linecache

    filename = "<dpsim-test-cell-1>"
    source = "def cell_fn(rank, world_size):\n    return 1 / (rank - rank)  # the failing line\n"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {}
    exec(compile(source, filename, "exec"), namespace)
    try:
        with pytest.raises(RankFailedError) as info:
            launch(namespace["cell_fn"], 1)
    finally:
        linecache.cache.pop(filename, None)
    assert "ZeroDivisionError" in info.value.traceback
    assert "# the failing line" in info.value.traceback


@pytest.mark.slow
def test_unpicklable_result_is_a_clear_rank_failure() -> None:
    with pytest.raises(RankFailedError, match="cannot be pickled") as info:
        launch(lambda r, w: {"rank": r, "rows": (x for x in range(3))}, 2)
    assert info.value.rank in (0, 1)
    assert "What cannot be pickled: result['rows'] (generator)." in str(info.value)
    _assert_no_ranks_left(info.value.pids)


@pytest.mark.slow
def test_keyboard_interrupt_in_parent_stops_all_ranks() -> None:
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches only the main thread")
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT does not raise KeyboardInterrupt in this process (a pytest-xdist "
                    "worker can ignore it); TEST_WORKERS=0 runs this test")
    # Ctrl-C once the ranks run; again every 2 s while launch() has not returned (one run
    # under two pytest-xdist workers saw the first SIGINT never raise in the main thread)
    done = threading.Event()

    def interrupt() -> None:
        while not done.wait(2.5):
            os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=interrupt, daemon=True)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            launch(lambda r, w: _sleep_forever(), 2, timeout_s=60)
    finally:
        done.set()
        sender.join()
    _assert_no_ranks_left(last_pids())


# --------------------------------------------------------------------------- inputs


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"world_size": 0}, "world_size"),
        ({"world_size": 65}, "world_size"),
        ({"world_size": 2.5}, "world_size"),
        ({"world_size": True}, "world_size"),
        ({"backend": "mpi"}, "backend"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": -1.0}, "timeout_s"),
        ({"timeout_s": math.nan}, "timeout_s"),
        ({"env": {"X": 1}}, "env"),
        ({"args": 3}, "args"),
        ({"master_addr": ""}, "master_addr"),
    ],
)
def test_bad_inputs_raise_value_error_naming_the_field(kwargs: dict[str, Any], field: str
                                                       ) -> None:
    with pytest.raises(ValueError, match=field):
        launch(lambda r, w: r, **kwargs)


def test_not_callable_and_unpicklable_arguments_raise_before_starting() -> None:
    with pytest.raises(ValueError, match="fn="):
        launch(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cannot be pickled") as info:
        launch(lambda r, w, g: r, 2, args=((x for x in range(2)),))
    assert "What cannot be pickled: args[0] (generator)." in str(info.value)


CELL = """
import socket, threading
LOCK = threading.Lock()        # dill pickles locks: not named
ROWS = (i for i in range(3))   # a generator: named
SOCK = socket.socket()

def helper():
    return next(ROWS)

def make_fn():
    conn = SOCK                # the same socket, reached through a closure
    def cell_fn(rank, world_size, limit=(i for i in range(2))):
        with LOCK:
            return helper() + len(str(SOCK)) + conn.fileno()
    return cell_fn
"""


def test_unpicklable_parts_of_fn_are_named_with_their_type() -> None:
    """Like a notebook cell: fn pickles by value with the globals, cells and defaults it uses."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(CELL, "<dpsim-test-cell-2>", "exec"), namespace)
    try:
        with pytest.raises(ValueError, match="cannot be pickled") as info:
            launch(namespace["make_fn"](), 2, kwargs={"opts": {"out": namespace["SOCK"]}})
    finally:
        namespace["SOCK"].close()
    message = str(info.value)
    for part in ("ROWS (generator; a global used by fn `cell_fn`)",
                 "SOCK (socket.socket; a global used by fn `cell_fn`)",
                 "conn (socket.socket; a variable of fn `cell_fn`'s closure)",
                 "limit (generator; the default of fn `cell_fn`'s parameter limit)",
                 "kwargs['opts']['out'] (socket.socket)"):
        assert part in message
    named = message.split("What cannot be pickled: ", 1)[1].split(". ", 1)[0]
    assert "LOCK" not in named
    assert "_thread" not in named


FSDP_CELL = """
import torch
from torch.distributed.fsdp import fully_shard   # at the top of the cell, as learners write it

def ping(n):                   # two functions of the cell that call each other
    return 0 if n == 0 else pong(n - 1)

def pong(n):
    return ping(n)

def cell_fn(rank, world_size):
    model = torch.nn.Linear(4, 4)
    fully_shard(model)
    return type(model).__name__, ping(3)
"""


def _fsdp_cell() -> dict[str, Any]:
    """A notebook cell's namespace: its functions live in `__main__`, dill ships them by value."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(FSDP_CELL, "<dpsim-test-cell-fsdp>", "exec"), namespace)
    return namespace


def test_a_cell_that_imports_fully_shard_at_its_top_ships() -> None:
    """dill's own search for the globals recursed without end inside fully_shard (torch
    2.13, dill 0.4.1: RecursionError); library functions now travel by reference."""
    import dill
    from torch.distributed.fsdp import fully_shard

    from dpsim.runtime.launch.pickling import by_reference, dumps, globals_used

    cell_fn = _fsdp_cell()["cell_fn"]
    assert by_reference(fully_shard)
    assert not by_reference(cell_fn)
    assert set(globals_used(cell_fn)) == {"torch", "fully_shard", "ping", "pong"}
    loaded = dill.loads(dumps(cell_fn))
    assert loaded.__globals__["fully_shard"] is fully_shard
    assert loaded.__globals__["ping"](4) == 0
    assert launch_job._ship(cell_fn, (), {})


@pytest.mark.slow
def test_a_cell_that_imports_fully_shard_runs_on_ranks() -> None:
    assert launch(_fsdp_cell()["cell_fn"], 2, backend="gloo", timeout_s=60) == [
        ("FSDPLinear", 0), ("FSDPLinear", 0)]


class _Holder:
    def __init__(self) -> None:
        self.rows = (i for i in range(2))
        self.size = 3

    def work(self, rank: int, world_size: int) -> int:
        return rank + self.size


def test_unpicklable_parts_of_methods_and_many_parts() -> None:
    from dpsim.runtime.launch.pickling import describe_unpicklable

    assert describe_unpicklable(_Holder().work, (), {}) == (
        "work.__self__.rows (generator; the object whose method is work)")
    many = describe_unpicklable(_return_rank, ([(i for i in "ab") for _ in range(20)],),
                                {"extra": (i for i in "c")})
    assert many.split("; ")[:2] == ["args[0][0] (generator)", "args[0][1] (generator)"]
    assert many.endswith("args[0][7] (generator); and more")
    assert describe_unpicklable(_return_rank, (1, "x"), {"n": 2}) == ""


def test_timeout_state_read_from_a_stack() -> None:
    """What a stuck rank was doing, from a faulthandler dump and the ranks that joined."""
    from dpsim.runtime.launch.states import rank_state

    site = "/usr/lib/python3.11/site-packages"
    dump = textwrap.dedent(f"""\
        Thread 0x00007f0000000001 (most recent call first):
          File "/usr/lib/python3.11/threading.py", line 320 in wait
        Current thread 0x00007f0000000002 (most recent call first):
          File "{site}/torch/distributed/distributed_c10d.py", line 2 in barrier
          File "{site}/torch/distributed/c10d_logger.py", line 8 in wrapper
          File "/home/me/train.py", line 12 in step
          File "/home/me/train.py", line 30 in work
          File "/x/dpsim/runtime/launch/rank.py", line 150 in _run_fn
          File "/x/dpsim/runtime/launch/rank.py", line 90 in rank_main
        """)
    assert rank_state(0, dump, {0, 1}, 2) == (
        "in a collective: blocked in barrier (torch.distributed), called from "
        "step (train.py, line 12)")
    python = dump.replace("torch/distributed/distributed_c10d.py", "torch/nn/modules/module.py")
    python = python.replace("torch/distributed/c10d_logger.py", "torch/nn/modules/linear.py")
    python = python.replace(" in barrier", " in forward").replace(" in wrapper", " in _call")
    assert rank_state(0, python, {0, 1}, 2) == (
        "running Python code in step (train.py, line 12), called from fn work (train.py, "
        "line 30); now inside forward (module.py, line 2)")
    joining = dump.replace(" in _run_fn", " in join_group")
    assert rank_state(1, joining, {0}, 2) == (
        "still starting: it never joined the process group (it was joining the process group)")
    assert rank_state(0, joining, {0}, 2).startswith("still starting: it joined the process "
                                                     "group and waits for rank(s) 1 to join")
    assert rank_state(1, None, {0}, 2) == "still starting: it never joined the process group"
    assert rank_state(1, None, {0, 1}, 2) == "running fn (its Python stack could not be read)"
    assert rank_state(1, joining, None, 2).startswith("still starting")


def test_timeout_message_lists_each_rank_state() -> None:
    err = LaunchTimeoutError([0, 1], 5.0, states={0: "in a collective: blocked in barrier",
                                                  1: "running Python code in f (a.py, line 3)"})
    assert err.states == {0: "in a collective: blocked in barrier",
                          1: "running Python code in f (a.py, line 3)"}
    text = str(err)
    assert "\n  rank 0: in a collective: blocked in barrier\n" in text
    assert "\n  rank 1: running Python code in f (a.py, line 3)\n" in text
    assert "same collectives in the same order" in text


def test_nccl_without_enough_gpus_suggests_gloo() -> None:
    if torch.cuda.is_available() and torch.cuda.device_count() >= 2:
        pytest.skip("this machine can run nccl on 2 ranks")
    with pytest.raises(ValueError, match="gloo"):
        launch(lambda r, w: r, 2, backend="nccl")


def test_choose_backend_one_rule_for_launch_and_torchrun() -> None:
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nccl_fits = dist.is_nccl_available() and gpus >= 2
    assert choose_backend("auto", 2) == ("nccl" if nccl_fits else "gloo")
    assert choose_backend("auto", gpus + 1) == "gloo"  # one GPU short: auto falls back
    assert choose_backend("gloo", 2) == "gloo"
    assert choose_backend("nccl", 2, check=False) == "nccl"  # torchrun: torch decides
    if not nccl_fits:
        with pytest.raises(ValueError, match="backend='nccl' needs one CUDA GPU per rank"):
            choose_backend("nccl", 2)
    with pytest.raises(ValueError, match="backend='mpi' is not known"):
        choose_backend("mpi", 2)


def test_cpu_tensors_get_gloo_whatever_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    """device="cpu": "auto" is gloo even with a GPU per rank (NCCL serves CUDA only)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    assert choose_backend("auto", 2) == "nccl"
    assert choose_backend("auto", 2, device="cpu") == "gloo"
    assert choose_backend("gloo", 2, device="cpu") == "gloo"
    with pytest.raises(ValueError, match="NCCL serves CUDA tensors only"):
        choose_backend("nccl", 2, device="cpu")
    with pytest.raises(ValueError, match="device='cuda:0' is not known"):
        choose_backend("auto", 2, device="cuda:0")


def test_transient_join_failures_start_the_group_again(monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]
                                                       ) -> None:
    """Gloo's connect can fail on a loaded machine before any rank ran fn: launch retries."""
    calls: list[float] = []

    def flaky_run(self: Any, deadline: float) -> list[Any]:
        calls.append(deadline)
        if len(calls) < 3:
            raise RankFailedError(0, "while joining the process group: RuntimeError: Gloo "
                                  "connectFullMesh failed with ... Connection closed by peer",
                                  phase="init")
        return ["ok"] * self.world_size

    monkeypatch.setattr(launch_job._Job, "run", flaky_run)
    assert launch(lambda r, w: r, 2) == ["ok", "ok"]
    assert len(calls) == 3
    assert len(set(calls)) == 1
    assert "attempt 3 of 3" in capsys.readouterr().err

    def fails_in_fn(self: Any, deadline: float) -> list[Any]:
        calls.append(deadline)
        raise RankFailedError(1, "RuntimeError: Connection closed by peer", phase="fn")

    calls.clear()
    monkeypatch.setattr(launch_job._Job, "run", fails_in_fn)
    with pytest.raises(RankFailedError):  # once fn may have run, never start it again
        launch(lambda r, w: r, 2)
    assert len(calls) == 1


def test_free_port_is_bindable() -> None:
    import socket

    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_store_never_falls_back_to_every_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch that refuses the pre-bound socket gets a clear error, not a wide-open store."""
    made: list[dict[str, Any]] = []

    def refusing_store(*args: Any, **kwargs: Any) -> Any:
        made.append(kwargs)
        if "master_listen_fd" in kwargs:
            raise TypeError("unexpected keyword argument 'master_listen_fd'")
        raise AssertionError("a store without master_listen_fd listens on every interface")

    monkeypatch.setattr(dist, "TCPStore", refusing_store)
    with pytest.raises(launch_ports.StoreBindError, match="every interface"):
        launch_ports.start_store("127.0.0.1", 2, 5.0)
    assert len(made) == 1
    assert "master_listen_fd" in made[0]


def test_store_listens_on_loopback_only() -> None:
    import psutil

    store, address, port = launch_ports.start_store("127.0.0.1", 1, 5.0)
    listening = [c.laddr for c in psutil.net_connections("tcp")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
    assert address == "127.0.0.1"
    assert listening
    assert all(a.ip == "127.0.0.1" for a in listening), listening
    del store


# --------------------------------------------------------------------------- like a notebook


def _run_script(tmp_path: Path, code: str, timeout: float = 120) -> tuple[int, str, str]:
    """Run `code` as a script in a fresh interpreter; return (returncode, stdout, stderr)."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()  # its ranks follow it (that is what the last test checks)
            proc.communicate()
    return proc.returncode, out, err


@pytest.mark.slow
def test_main_module_functions_and_globals_are_shipped(tmp_path: Path) -> None:
    """Like a notebook: fn, a helper, a class and a constant live in __main__.

    The launch call is not under `if __name__ == "__main__"`: the ranks must not re-run the
    script (that would print TOP twice or recurse).
    """
    returncode, out, err = _run_script(tmp_path, """
        import torch
        import torch.distributed as dist
        from dpsim.runtime.launch import launch

        print("TOP", flush=True)
        SCALE = 3.0

        class Point:
            def __init__(self, x):
                self.x = x

        def helper(t):
            return t * SCALE

        def fn(rank, world_size):
            t = helper(torch.tensor([rank + 1.0]))
            dist.all_reduce(t)
            return Point(t.item())

        print("RESULT", [p.x for p in launch(fn, 2)], flush=True)
    """)
    assert returncode == 0, err
    assert out.count("TOP") == 1, out
    assert "RESULT [9.0, 9.0]" in out, out


@pytest.mark.slow
def test_ranks_exit_when_the_launching_process_dies(tmp_path: Path) -> None:
    returncode, out, err = _run_script(tmp_path, f"""
        import json, os, signal, threading, time
        from dpsim.runtime.launch import launch, last_pids

        ready = {str(tmp_path)!r}

        def fn(rank, world_size):
            open(os.path.join(ready, f"ready{{rank}}"), "w").close()
            time.sleep(1e9)

        def killer():
            while not all(os.path.exists(os.path.join(ready, f"ready{{r}}")) for r in (0, 1)):
                time.sleep(0.05)
            print(json.dumps(last_pids()), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)

        threading.Thread(target=killer, daemon=True).start()
        launch(fn, 2, timeout_s=60)
    """)
    assert returncode == -signal.SIGKILL, err
    pids = json.loads(out.strip().splitlines()[-1])
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in pids), f"orphaned ranks: {pids}"


def test_deadlock_names_the_peer_a_line_receives_from(tmp_path: Path) -> None:
    """The peer is read from the learner's line: a number, or an expression of rank and
    world_size; a line that waits on a request without naming a peer is still a wait."""
    from dpsim.runtime.launch.deadlock import describe, waiting_in

    code = tmp_path / "cell.py"
    code.write_text("def fn(rank, world_size):\n"
                    "    dist.recv(t, src=(rank - 1) % world_size)\n"
                    "    req.wait()\n"
                    "    time.sleep(5)\n")

    def dump(line: int, *above: tuple[str, int, str]) -> str:
        frames = [f'  File "{path}", line {n} in {name}' for path, n, name in above]
        return "\n".join(["Current thread 0x00007f (most recent call first):", *frames,
                          f'  File "{code}", line {line} in fn',
                          '  File "/x/dpsim/runtime/launch/rank.py", line 9 in _run_fn'])

    recv = waiting_in(0, 3, dump(2, ("/v/torch/distributed/distributed_c10d.py", 5, "recv")))
    assert recv is not None
    assert (recv.call, recv.peer, recv.direction) == ("recv", 2, "from")
    wait = waiting_in(1, 3, dump(3))
    assert wait is not None
    assert wait.call == "wait"
    assert wait.peer is None
    assert waiting_in(2, 3, dump(4, ("/usr/lib/python3.11/time.py", 1, "sleep"))) is None
    assert waiting_in(2, 3, dump(4)) is None  # sleeping in the learner's code: not a wait
    states = describe({0: recv, 1: wait}, finished=[2])
    assert states[0].startswith("waits for a message rank 2 never sent (rank 2 finished fn)")
    assert states[1].startswith("waits for a request")
