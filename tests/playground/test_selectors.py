from datetime import timedelta

from django.utils import timezone

from playground import selectors


def test_run_list_is_newest_first(run_factory):
    # given
    first, second = run_factory(), run_factory()

    # then
    assert list(selectors.run_list()) == [second, first]


def test_run_get_finds_a_run_or_nothing(run_factory):
    # given
    run = run_factory()

    # then
    assert selectors.run_get(run_id=run.id) == run
    assert selectors.run_get(run_id="00000000-0000-0000-0000-000000000000") is None


def test_the_active_count_is_queued_plus_running(run_factory):
    # given
    for status in ("queued", "running", "running", "done", "failed", "cancelled"):
        run_factory(status=status)

    # then
    assert selectors.run_active_counts().total == 3


def test_the_active_counts_give_a_visitor_one_slot_per_compared_group(run_factory):
    # given: a run of "a" with two active siblings (one slot), another run of "a" (a
    # second slot), a finished sibling, and runs of "b"
    first = run_factory(visitor="a", status="running")
    run_factory(visitor="a", status="queued", compare_of=first)
    run_factory(visitor="a", status="running", compare_of=first)
    run_factory(visitor="a", status="done", compare_of=first)
    run_factory(visitor="a", status="queued")
    run_factory(visitor="b", status="queued", compare_of=first)
    run_factory(visitor="b", status="running")

    # when
    alone = selectors.run_active_counts(visitor="a")
    joining = selectors.run_active_counts(visitor="a", joining=first)
    nobody = selectors.run_active_counts()

    # then: joining the group leaves its slot out and counts the visitor's active siblings
    assert (alone.total, alone.slots, alone.siblings) == (6, 2, 0)
    assert (joining.total, joining.slots, joining.siblings) == (6, 1, 2)
    assert (nobody.slots, nobody.siblings) == (0, 0)


def test_a_running_run_is_stale_once_its_heartbeat_is_old(run_factory, settings):
    # given
    now = timezone.now()
    old = now - timedelta(seconds=settings.PLAYGROUND_STALE_AFTER_S + 1)
    stale = run_factory(status="running", heartbeat_at=old)
    fresh = run_factory(status="running", heartbeat_at=now)
    finished = run_factory(status="done", heartbeat_at=old)

    # then
    assert list(selectors.run_stale_list(now=now)) == [stale]
    assert selectors.run_is_stale(run=stale, now=now)
    assert not selectors.run_is_stale(run=fresh, now=now)
    assert not selectors.run_is_stale(run=finished, now=now)


def test_a_queued_run_is_stale_once_it_has_waited_too_long(run_factory, settings):
    # given
    later = timezone.now() + timedelta(seconds=settings.PLAYGROUND_QUEUED_TIMEOUT_S + 1)
    queued = run_factory()

    # then
    assert list(selectors.run_stale_list(now=later)) == [queued]
    assert selectors.run_is_stale(run=queued, now=later)
    assert not selectors.run_is_stale(run=queued)


def test_tokens_after_a_position(run_factory):
    # given
    run = run_factory(tokens=5)

    # then
    assert [t.position for t in selectors.run_tokens(run=run, after=2)] == [3, 4]
    stored = selectors.run_events_after(run_id=run.id, after=0, limit=2)
    assert [event["position"] for event in stored] == [1, 2]


def test_progress_is_the_run_and_its_events_after_a_position(run_factory):
    # given
    run = run_factory(tokens=3, status="done")

    # when
    found, events = selectors.run_progress(run_id=run.id, after=0)

    # then
    assert found == run and [event["position"] for event in events] == [1, 2]


def test_csv_rows_have_a_cumulative_column_per_loop_of_the_run(run_factory):
    # given: 6 loops asked for (extrapolating), tokens that computed 2
    run = run_factory(tokens=1, params={"loops": 6})

    # when
    header, row = selectors.run_token_rows(run=run)

    # then
    assert header[-6:] == [f"cumulative_{t}" for t in range(1, 7)]
    assert row[-6:] == [0.3, 0.6, "", "", "", ""]
