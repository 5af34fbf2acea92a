"""The options of the `gpuroster` policy (fast mode): prices, bounds and which passes a
plan tries. Full mode reads them too, for the services' side of its plan.

Purely computational: the standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Options:
    # Shortfall cost per GPU-step, x the service's priority. A job starts over the
    # services' curve only now, and only when that beats its start beside the curve (if
    # any within reach) by more than the shortfall it causes at this price; 1e9 makes the
    # curve a floor.
    realtime_penalty: float = 8.0
    decay: float = 0.03  # reward weight 1 / (1 + decay * k) for step now + k
    # The starvation bound: a job that has waited this many hours is placed first (two days:
    # two horizons of a day). In hours, so it bounds the same wait at any step length. As
    # 48 steps it was 12 h at 15-minute steps, where starving jobs placed oldest first left
    # gpuroster 8.1% under priority-easy's value (60 trace-shaped instances over two days;
    # 12.5% on 30 of the Philly mix; 4.3% at 30-minute steps); in hours +1.3% over it
    # (+1.6%; +0.7%). `bench/steps.py`, 2026-12-05. Hourly steps plan as before.
    # `max_wait_steps`, when set, gives the bound in steps instead (`wait_steps`).
    max_wait_hours: float = 48.0
    max_wait_steps: int | None = None
    lookahead_cap: int = 96  # steps past now the capacity check looks at, at most
    error_memory: float = 0.7  # how fast a recent forecast miss fades with lead time
    # A service's objective when it sets none: headroom over its forecast covers the
    # recent forecast error at this quantile (`headroom`), over `error_window` steps (0:
    # a day). 0.995, not 0.99: sized on a day (or two, with the stand-in) of error, the
    # objective is met in hindsight and missed ahead by the next error larger than any
    # seen, more often than fifo's all-day reservation of the forecast peak misses. At
    # 0.995 the instances more than 0.5 points under fifo's service level fall 2 -> 1 of
    # the wrong-forecast family's 100 (held out 5 -> 4), 18 -> 10 of 100 day-earlier
    # ones, 22 -> 18 of 40 over three days, for 0-0.5 points of the family's value gain
    # and 2.6-3.4 of the day-earlier ones' (value >= fifo's on as many, but one of the
    # 100 day-earlier; forecast-error 2368 -> 2366; `bench/slo.py`, 2026-12-04).
    # A window of a day, not two: two days kept a burst's headroom long after it
    # (forecast-error's launch night: value 2286 -> 1910 then, 2368 -> 2346 now, under
    # priority-skip's 2361); six hours forgot level errors (service level 98.0 -> 96.4%).
    service_level: float = 0.995
    error_window: int = 0
    # A peak may come this many hours early or late (a forecast of the same hours a day
    # or a week earlier does not know today's timing): until the service's demand has
    # been seen through a swing of its forecast (`evidence` times the swing ahead), the
    # plan holds the forecast dilated by this much each way (at most an eighth of the
    # horizon), so no uninterruptible job starts on GPUs an early or late peak needs;
    # after, on the side of the lag that aligned the forecast with the demand seen (none
    # when it came on time). See `headroom.span`. 3 hours by default: the range a
    # day-old or week-old forecast's peak moves by (a shift of work hours, a clock
    # change, a launch), the 1-3 h. On 100 instances of the wrong-forecast family
    # at objective 0.99 it takes the instances more than 0.5 points below fifo's service
    # level 25 -> 2 (shifted peaks 20 -> 0; on 100 held out 28 -> 7), the six
    # exact-forecast scenarios' values within 0.1%; forecast-error's value 2367 -> 2350
    # at service level 97.6 -> 98.4% (`bench/slo.py`; 2026-12-04). 0: off.
    shift_hours: float = 3.0
    evidence: float = 1.0
    # Until a service has four days of its own history (`servicing.COPY_WINDOWS` error
    # windows), its forecast's jitter tops it up (`headroom.jitter`,
    # `servicing.service_room`): a forecast that zigzags or turns at a single step three
    # times (and is no pattern shorter than a day written out again) is a copy of past
    # demand, whose noise today's demand will have too (and whose headroom stays sized on
    # four days of error after; 0 turns that off too; two days until 2026-12-05, the
    # figures below; single-step turns since then, docs/wrong-forecasts.md). Its level:
    # the running median over this many hours each side (3: a burst of up to three hours is
    # jitter). A forecast that does neither stands in for nothing, so the seven files plan
    # exactly as without it. Three hours, not two (2026-12-07, at 0.995; fails counted as
    # more than 0.5 points under fifo's service level): trace-shaped day-earlier copies
    # (seeds 600, 1700, 2800, 4100, and 7100 over three days) 35 -> 21 of 440, value at
    # least fifo's 410 -> 407, 0.1-1.3 points of value; 767 of eleven sets 26 -> 24, 757 ->
    # 756; 340 never run before 17 -> 14, 317 either way; the family and the seven
    # unchanged in both counts; a model's forecast off by noise at every step (which
    # zigzags too, `bench/steps.py --service-share 0.5`) +2.55% -> -0.49% of
    # priority-easy's value, both at 100%. With two days, at 0.99
    # (`bench/slo.py`, 2026-12-04): day-earlier family under fifo's service level 21 ->
    # 5 of 40, service level 98.32 -> 99.45% (fifo 98.61%), value vs fifo +56.1 ->
    # +42.5%; 100 more day-earlier instances (seed 9000) 58 -> 18, 98.15 -> 99.31% (fifo
    # 98.90%), +54.4 -> +43.5%; the family 2 either way (held out 5), value >= fifo's
    # on 97 (held out 98 -> 97). 0: off.
    stand_in_hours: float = 3.0
    # Headroom never raises a service's plan above this many times the larger of its
    # forecast's peak over the day ahead (what fifo reserves all day) and its demand's peak
    # over the error window (while the stand-in fills it: the real demand's peak and the
    # static reservation, not the stand-in's draws, since the seventh session of
    # 2026-12-05: noise at sigma 0.6 -10.2% -> -3.4% against priority-easy;
    # `servicing.service_room`); 0: no cap. 1.2: the most a day-old forecast's peak grows
    # by in a day (the day-earlier family draws 0-25%). Measured at
    # 0.995 (2026-12-05): forecasts off by a lognormal sigma of 0.6 at every step 16.6% ->
    # 10.2% under priority-easy's value at the same 100% service level (`bench/steps.py
    # --minutes 60 --seeds 300-344 --forecast-error 0.6`; at 0.3 +2.1 -> +2.5% over it);
    # trace-shaped day-earlier +18.8 -> +19.8% over fifo (priority-easy +19.3%); under
    # fifo's service level as many or fewer on eight sets looked at before (day-earlier
    # 3 -> 2 of 40), on six held out 9 -> 8, 9 -> 10, the rest as many; forecast-error
    # 2366 -> 2363 (priority-skip 2361). At 1.0, multi-day runs lost service level
    # (docs/wrong-forecasts.md, "Headroom capped", has all of these).
    headroom_cap: float = 1.2
    # Once a service has got more of its demand than its static reservation (the peak of
    # its forecast, held all day, as fifo holds it) would have given it, by more than this
    # share of its demand (a point: twice the half point the issue allows below fifo), its
    # plan holds no more than the larger of that reservation and its forecast raised by
    # its typical (median) error: headroom for rarer errors above the reservation gives
    # way to batch work, and reaches the service only as spare replicas on GPUs no job
    # wants (`servicing.held_to_reservation`; the record is `ServiceState.past_held`).
    # Headroom sized to catch spikes at 0.995 held up to twice the forecast all day and
    # took 3-9 points of service level over fifo's at a loss of value to it. Measured at
    # 0.995 on 1,227 instances (2026-12-06; the family's seeds 2500, 3000, 5000, 8000,
    # 8500, day-earlier 7000, 9000, 13000, and 11000 and 17000 over three days,
    # trace-shaped day-earlier 600 and 1700, the trace-shaped family 6000 and 9500, the
    # seven): value under fifo's 46 -> 29 instances, value +37.7 -> +38.8% over fifo,
    # under fifo's service level 56 either way, mean service level 98.94 -> 98.70%; the
    # six exact-forecast files' grids unchanged, forecast-error 2363 -> 2381
    # (docs/wrong-forecasts.md). None: off.
    reservation_lead: float | None = 0.01
    reserve_factor: float = 2.0  # reservations reach this many horizons ahead
    # Job placements a plan's passes (queue orders and modes) may take together: a queue
    # of q jobs gets the first budget // q of the passes that differ (identical orders
    # merged), at least one. Before 2026-12-07 every pass up to 200 jobs and one past
    # it: the deep queue's slowest re-plans were six passes over 150-200 jobs. With 600
    # (three or four passes there, two up to 300 jobs), interleaved on this VM: the deep
    # queue's p99 16.7-20.0 -> 10.0-11.6 ms, the starved one's 28.7-33.9 -> 12.2-15.2 ms;
    # value of the deep case -0.01%, the starved +0.7%, 36 generated runs of 32-128 GPUs
    # with queues of 222-617 jobs +0.25% (each -1.9% to +2.6%). Shorter queues do not
    # move: the seven files' grids and 160 wrong-forecast instances hash the same
    # (docs/benchmarks.md#plan-time).
    pass_budget: int = 600
    migrate_steps: int = 12  # services move off blocks planned to start this soon
    overrun_guard: int = 1  # steps a running job may outlast its estimate, for services' room
    # "reach" took the place of "priority-short" (shortest first within a priority)
    # on 2026-12-01, at the same cost: see `ordering.ordered`. "priority-short" came back on
    # 2026-12-02: on the uniform-priority file calibrated to the published baseline it
    # is the one order that packs well (value 663 -> 707, priority-easy 673); on 60
    # generated instances with every priority 1 it changes nothing on average (-0.02%:
    # 1 better, 2 worse, worst -1.2%; `bench/orders.py --uniform --seeds 100-114`).
    orders: tuple[str, ...] = (
        "priority", "priority-size", "reach", "priority-long", "priority-short")
    # One more pass in priority order that first starts every job that fits now. Where
    # that first phase starts now just the jobs the plain "priority" pass started now
    # before any it did not, it is that pass from there on and stops (`frame.Opening`): at
    # 8 GPUs and 15 jobs, most re-plans (8-9% of their time; same plans).
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
    # `reservation_lead` held it to its reservation): they
    # cost no job anything, and a forecast that ran low is served from them. Only as many
    # as the swap cap can give back at the next step on top of the curve's own fall, so
    # the next plan finds the service on its curve. (Trace-shaped instances whose
    # forecast is the same hours a day earlier lost a quarter of their shortfall at steps
    # where GPUs sat idle; `bench/slo.py`.)
    spare_fill: bool = True

    def wait_steps(self, steps_per_day: int) -> int:
        """The starvation bound in steps of a day of `steps_per_day`: `max_wait_steps`
        when set, else `max_wait_hours` of steps (at least one)."""
        if self.max_wait_steps is not None:
            return self.max_wait_steps
        return max(1, round(self.max_wait_hours * steps_per_day / 24))
