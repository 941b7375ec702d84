"""The benchmark's own arithmetic: how a phase's rate is counted, ABBA rounds, the closing note."""

from __future__ import annotations

import pytest

from bench.concurrency import OCR, Scaling, abba, misses
from bench.load import LoadResult, Reply
from bench.report import Report, Row, Table


def _reply(began: float, ended: float, status: int = 200) -> Reply:
    return Reply(status, ended - began, ended=ended)


def test_a_request_counts_by_the_share_of_its_latency_inside_the_window() -> None:
    reply = _reply(9.0, 11.0)
    assert reply.share_within(0.0, 10.0) == pytest.approx(0.5)
    assert reply.share_within(10.0, 20.0) == pytest.approx(0.5)
    assert reply.share_within(0.0, 20.0) == pytest.approx(1.0)
    assert reply.share_within(12.0, 20.0) == 0.0


def _two_workers_four_clients() -> list[Reply]:
    """Four clients on two workers, 1 s per request, sending for 10 s: each worker serves two
    clients in turn, so after the first round every request waits 1 s and is served 1 s."""
    replies = []
    for _worker in range(2):
        replies += [_reply(0, 1)] + [_reply(t, t + 2) for t in range(1, 10, 2)]  # its 1st client
        replies += [_reply(t, t + 2) for t in range(0, 10, 2)]  # its 2nd, queued from the start
    return replies


def test_the_rate_is_the_steady_one_without_the_drain_or_the_standing_start() -> None:
    load = LoadResult(4, _two_workers_four_clients(), wall=11.0, started=0.0, duration=10.0)
    # Each worker serves a request a second: 2 requests/s while every client sends.
    assert load.steady_per_second() == pytest.approx(2.0)
    # Counted from the start, the first queued waits would count as work: 2.1/s.
    from_start = sum(r.share_within(0.0, 10.0) for r in load.ok) / 10.0
    assert from_start == pytest.approx(2.1)
    # With the drain: here both workers stay busy through it, so it reads the same.
    assert load.per_second == pytest.approx(22 / 11)


def test_failed_requests_are_no_work() -> None:
    replies = [_reply(0, 1), _reply(1, 2), _reply(2, 3, status=503), _reply(3, 4)]
    load = LoadResult(1, replies, started=0.0, duration=4.0)
    assert load.steady_per_second() == pytest.approx(2 / 3)


def test_a_rate_needs_a_bounded_run_in_which_every_client_had_a_reply() -> None:
    with pytest.raises(ValueError, match="duration"):
        LoadResult(1, [_reply(0, 1)], wall=1.0).steady_per_second()
    with pytest.raises(ValueError, match="no steady load"):
        LoadResult(4, [_reply(0, 1)] * 3, wall=1.0, started=0.0, duration=1.0).steady_per_second()


def test_abba_runs_one_many_many_one_and_groups_them_by_count() -> None:
    asked: list[int] = []
    drift = iter([1.0, 2.2, 1.8, 0.8])  # the host slows down steadily through the round

    def phase(at_once: int) -> float:
        asked.append(at_once)
        return next(drift)

    assert abba(phase, 4) == {1: [1.0, 0.8], 4: [2.2, 1.8]}
    assert asked == [1, 4, 4, 1]


def test_a_section_table_miss_reaches_the_closing_note_once() -> None:
    low = Scaling("one model per worker (default)", OCR, one=[1.0, 1.0, 1.0], many=[1.8, 1.85, 2.0])
    good = Scaling("one model per worker (default)", OCR, one=[1.0] * 3, many=[1.9, 1.95, 2.0])
    assert [low.met(), good.met()] == [False, True]
    report = Report("quick", "defaults")
    report.add(Row("a main row", "1 s", "2 s", 2.0, "<= 1.05x", False))
    report.tables.append(Table("Stages (bench/stages.py)", ["| clip | **no** |"]))
    report.tables.append(
        Table("4 clients against 1 (bench/concurrency.py)", [], misses([low, good]))
    )
    note = report.markdown(None).split("## Closing note")[1]
    assert note.count("\n- **") == 2, note  # the stage table's row is the main table's row
    assert "**a main row**" in note
    assert (
        "**4 clients against 1**: one model per worker (default), OCR: half A4, 150 dpi:"
        " median 1.85x, lowest round 1.80x, against 1.9x (its table)." in note
    )
