"""The run's plain progress line off a terminal: units, experiments in progress, workers busy,
and the time left the driver gives it, at most once per interval."""

from __future__ import annotations

from implicit_em.report.running.progress import RunProgress


def test_the_plain_line_says_the_time_left_it_is_given_at_most_once_per_interval():
    now = [0.0]
    lines: list[str] = []
    bar = RunProgress(4, 2, lines.append, every=60.0, clock=lambda: now[0])
    bar.advance({"E7": (1, 3)}, 2, 7200.0)
    assert lines == []  # within the first minute
    now[0] = 61.0
    bar.advance({"E7": (2, 3)}, 1, 6480.0)
    assert lines == ["units 2/4 (E7 2/3), 1/2 workers busy, about 108 min left"]
    bar.close()
