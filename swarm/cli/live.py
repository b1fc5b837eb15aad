"""The live view of a run: a table per target, refreshed while it runs.

Place in the map (docs/architecture.md, "CLI"): the only place that knows rich's live display;
fed by the runtime's RunStats.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from swarm.runtime.live_stats import RunStats, behind_schedule


def _fmt(value: float | None, spec: str = ".1f", suffix: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{suffix}"


class LiveView:
    """What the terminal shows while a target runs (refreshed by rich's own thread)."""

    def __init__(self, total_sessions: int) -> None:
        self.total_sessions = total_sessions
        self.rows: list[tuple[str, RunStats, float, float | None]] = []
        self._last: tuple[float, int] = (time.monotonic(), 0)
        self._rate = 0.0

    def start_target(self, name: str, stats: RunStats) -> None:
        if self.rows:
            name0, st0, t0, _ = self.rows[-1]
            self.rows[-1] = (name0, st0, t0, time.monotonic())
        self.rows.append((name, stats, time.monotonic(), None))
        self._last = (time.monotonic(), 0)

    def __rich__(self) -> Table:
        table = Table(title="swarm run", expand=False)
        for col in (
            "target",
            "elapsed",
            "agents",
            "requests",
            "in flight",
            "errors",
            "out tok/s",
            "TTFT p50",
            "TTFT p99",
            "cache hit",
            "ideal",
            "lag p99",
            "late",
            "client lag p99",
        ):
            table.add_column(col, justify="right" if col != "target" else "left")
        now = time.monotonic()
        for i, (name, st, t0, t1) in enumerate(self.rows):
            snap = st.snapshot()
            elapsed = (t1 or now) - t0
            if i == len(self.rows) - 1 and t1 is None and not st.finished:
                last_t, last_tokens = self._last  # while sending: the rate over the last second
                if now - last_t >= 1.0:
                    self._rate = (st.completion_tokens - last_tokens) / (now - last_t)
                    self._last = (now, st.completion_tokens)
                rate = self._rate
            else:  # once sending has stopped: the run's average
                if st.finished and t1 is None:
                    t1 = now
                    self.rows[i] = (name, st, t0, t1)
                    elapsed = t1 - t0
                rate = st.completion_tokens / elapsed if elapsed > 0 else 0.0
            agents = f"{snap['sessions_finished']}/{snap['sessions_started']}/{self.total_sessions}"
            if snap["sessions_cut"]:
                agents += f" ({snap['sessions_cut']} cut)"
            errors = str(snap["errors"]) + (f" (+{snap['cancelled']} cancelled)" if snap["cancelled"] else "")
            table.add_row(
                name,
                f"{elapsed:.0f}s",
                agents,
                str(snap["requests"]),
                str(snap["in_flight"]),
                Text(errors, style="red" if snap["errors"] else ""),
                f"{rate:,.0f}",
                _fmt(snap["ttft_p50_ms"], ".0f", " ms"),
                _fmt(snap["ttft_p99_ms"], ".0f", " ms"),
                _fmt(None if snap["cache_hit_ratio"] is None else 100 * snap["cache_hit_ratio"], ".1f", "%"),
                _fmt(None if snap["ideal_hit_ratio"] is None else 100 * snap["ideal_hit_ratio"], ".1f", "%"),
                _fmt(snap["lag_p99_ms"], ".0f", " ms"),
                Text(str(snap["late"]), style="bold yellow" if snap["late"] else ""),
                _fmt(snap["client_lag_p99_ms"], ".1f", " ms"),
            )
        table.caption = (
            "agents: done/started/total (cut short by a stop); cache hit: server-reported cached/prompt "
            "tokens; ideal: longest shared prefix; lag: sent minus due, less any wait for the in-flight "
            "cap; late: lag > 10 ms (the generator is behind); client lag: per request, the longest the "
            "client took to read a token the kernel had received (its own delay, kept out of TTFT)"
        )
        if any(behind_schedule(st) for _, st, _, _ in self.rows):
            table.caption += "\n[bold yellow]the generator is behind its schedule: see late / lag p99[/]"
        return table


class LiveDisplay:
    """The live view, shown from the first target's start: the input is checked, the targets
    probed and Ray started before it, so an error there is never printed under an empty table."""

    def __init__(self, view: LiveView, console: Console, enabled: bool) -> None:
        self.view = view
        self.console = console
        self.enabled = enabled
        self._live: Live | None = None

    def start_target(self, name: str, stats: RunStats) -> None:
        self.view.start_target(name, stats)
        if self.enabled and self._live is None:
            self._live = Live(self.view, console=self.console, refresh_per_second=2, transient=False)
            self._live.start()

    def stop(self) -> None:
        if self._live is not None:
            self._live.stop()
