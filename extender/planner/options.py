"""The options of the `gpuroster` policy (fast mode): prices, bounds and which passes a
plan tries. Full mode reads them too, for the services' side of its plan.

Purely computational: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Options:
    """The `gpuroster` policy's options. The runs that chose the defaults: docs/options.md."""

    # Shortfall cost per GPU-step, x the service's priority. A job starts over the
    # services' curve only now, and only when that beats its start beside the curve (if
    # any within reach) by more than the shortfall it causes at this price; 1e9 makes the
    # curve a floor.
    realtime_penalty: float = 8.0
    decay: float = 0.03  # reward weight 1 / (1 + decay * k) for step now + k
    # The starvation bound: a job that has waited this many hours is placed first (two days:
    # two horizons of a day). In hours, so it bounds the same wait at any step length.
    # `max_wait_steps`, when set, gives the bound in steps instead (`wait_steps`).
    max_wait_hours: float = 48.0
    max_wait_steps: int | None = None
    lookahead_cap: int = 96  # steps past now the capacity check looks at, at most
    error_memory: float = 0.7  # how fast a recent forecast miss fades with lead time
    # A service's objective when it sets none: headroom over its forecast covers the
    # recent forecast error at this quantile (`headroom`), over `error_window` steps (0:
    # a day). Above 0.99, since the next error is often larger than any in a day of them.
    service_level: float = 0.995
    error_window: int = 0
    # A peak may come this many hours early or late (a forecast of the same hours a day
    # or a week earlier does not know today's timing): until the service's demand has
    # been seen through a swing of its forecast (`evidence` times the swing ahead), the
    # plan holds the forecast dilated by this much each way (at most an eighth of the
    # horizon), so no uninterruptible job starts on GPUs an early or late peak needs;
    # after, on the side of the lag that aligned the forecast with the demand seen (none
    # when it came on time). See `headroom.span`. 0: off.
    shift_hours: float = 3.0
    evidence: float = 1.0
    # Until a service has four days of its own history (`servicing.COPY_WINDOWS` error
    # windows), a forecast that zigzags or turns at a single step three times (and is no
    # pattern shorter than a day written out again) is a copy of past demand, whose noise
    # today's demand will have too: its jitter tops the headroom up (`headroom.jitter`,
    # `servicing.service_room`). Its level: the running median over this many hours each
    # side (a burst of up to this long is jitter). 0: off.
    stand_in_hours: float = 3.0
    # Headroom never raises a service's plan above this many times the larger of its
    # forecast's peak over the day ahead (what fifo reserves all day) and its demand's peak
    # over the error window (`servicing.service_room`): 1.2 is the most a day-old
    # forecast's peak grows by in a day. 0: no cap. Whatever the headroom, a service's plan
    # holds at most its static reservation until demand is seen above it, then at most this
    # many times the most demand seen (`servicing.ceiling`): never more GPU-steps than the
    # reservation it replaces, unless its demand took them.
    headroom_cap: float = 1.2
    # Once a service's forecast was seen wrong, its plan covers each step as the steps seen
    # would have needed at its objective (`servicing.cover`): the forecast's envelope over
    # one of `cover_hours` each way, times a ratio, plus a GPU. A service of a few GPUs
    # misses its objective on one GPU-step short, which an objective met on average misses.
    cover: bool = True
    cover_hours: tuple[float, ...] = (1.0, 2.0, 3.0)
    # Once a service has got more of its demand than its static reservation (the peak of
    # its forecast, held all day, as fifo holds it) would have given it, by more than this
    # share of its demand, its plan holds no more than the larger of that reservation and
    # its forecast raised by its typical (median) error: headroom for rarer errors gives
    # way to batch work, and reaches the service only as spare replicas on GPUs no job
    # wants (`servicing.held_to_reservation`; the record is `ServiceState.past_held`).
    # None: off.
    reservation_lead: float | None = 0.01
    reserve_factor: float = 2.0  # reservations reach this many horizons ahead
    # Job placements a plan's passes (queue orders and modes) may take together: a queue
    # of q jobs gets the first budget // q of the passes that differ (identical orders
    # merged), at least one, so a deep queue's re-plan stays short.
    pass_budget: int = 600
    migrate_steps: int = 12  # services move off blocks planned to start this soon
    overrun_guard: int = 1  # steps a running job may outlast its estimate, for services' room
    # The queue orders a plan tries, each placed by one pass (`ordering.ordered`).
    orders: tuple[str, ...] = (
        "priority", "priority-size", "reach", "priority-long", "priority-short")
    # One more pass in priority order that first starts every job that fits now. Where
    # that first phase starts now just the jobs the plain "priority" pass started now
    # before any it did not, it is that pass from there on and stops (`frame.Opening`).
    fill_now: bool = True
    # One more when some job fits nowhere beside the services' curve: its trade first.
    trade_first: bool = True
    # A job only a trade starts that waited past `max_wait_hours` trades at the first
    # step a block of it frees, instead of waiting for one free now.
    drain: bool = True
    # Work planned after a starving job ends this share of its own estimate (at least
    # `overrun_guard` steps) before the starving job starts on its GPUs.
    starving_margin: float = 0.5
    # A job that fits beside the services' curve only later may start now over it
    # instead, when that is worth more than the later start net of the shortfall it
    # causes: each queue order that meets such a trade is planned once more taking it,
    # and the objective picks.
    trade_sooner: bool = True
    # GPUs nobody holds at step now and no job is planned on within `migrate_steps` go to
    # the services as spare replicas, up to each one's own peak over the horizon (before
    # `reservation_lead` held it to its reservation): they cost no job anything, and a
    # forecast that ran low is served from them. Only as many as the swap cap can give
    # back at the next step on top of the curve's own fall, so the next plan finds the
    # service on its curve.
    spare_fill: bool = True

    def wait_steps(self, steps_per_day: int) -> int:
        """The starvation bound in steps of a day of `steps_per_day`: `max_wait_steps`
        when set, else `max_wait_hours` of steps (at least one)."""
        if self.max_wait_steps is not None:
            return self.max_wait_steps
        return max(1, round(self.max_wait_hours * steps_per_day / 24))
