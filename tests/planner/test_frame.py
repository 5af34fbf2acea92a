"""The room as bytes that the passes search, against its plain definition."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from extender.planner import frame


def _first_clear(room: list[int], size: int, k: int, d: int) -> int:
    """The first start from `k` whose run (cut at the window's end) has room for `size`
    at every step, one start at a time; len(room) when none has."""
    W = len(room)
    while k < W and min(room[k:min(k + d, W)]) < size:
        k += 1
    return k


@given(room=st.lists(st.integers(-3, 9), min_size=1, max_size=40), size=st.integers(1, 8),
       k=st.integers(0, 40), d=st.integers(1, 50))
def test_the_byte_search_finds_the_first_start_with_room(room: list[int], size: int, k: int,
                                                         d: int) -> None:
    packed = frame.pack(room)
    assert packed is not None and list(packed) == [max(0, x) for x in room]
    bad = packed.translate(frame.below(size))
    k = min(k, len(room) - 1)
    assert min(frame.clear_from(bad, k, d), len(room)) == _first_clear(room, size, k, d)


@given(room=st.lists(st.integers(-3, 9), min_size=1, max_size=40), size=st.integers(1, 8),
       taken=st.integers(0, 9), lo=st.integers(0, 40), hi=st.integers(0, 40))
def test_packed_room_less_a_job_is_the_room_less_it(room: list[int], size: int, taken: int,
                                                    lo: int, hi: int) -> None:
    packed = frame.pack(room)
    assert packed is not None
    packed[lo:hi] = packed[lo:hi].translate(frame.less(taken))
    after = [x - taken if lo <= t < hi else x for t, x in enumerate(room)]
    assert list(packed) == [max(0, x) for x in after]
    assert frame.pack([0, 256]) is None
