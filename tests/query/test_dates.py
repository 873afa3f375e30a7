"""The calendar arithmetic behind the date expressions, checked against Python's datetime over its
range: civil dates, date parts (including %U and ISO weeks), fixed offsets, and parsing."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ebbdb.storage.core.errors import QueryError
from ebbdb.storage.query import dates

# Instants datetime can hold: years 1 to 9999.
MIN_MS = -62135596800000
MAX_MS = 253402300799999
UTC = datetime.UTC


@given(st.integers(MIN_MS, MAX_MS))
def test_parts_match_datetime(ms: int) -> None:
    p = dates.parts_of(ms, dates.UTC)
    dt = datetime.datetime(1970, 1, 1, tzinfo=UTC) + datetime.timedelta(milliseconds=ms)
    iso = dt.isocalendar()
    assert (p.year, p.month, p.day, p.hour, p.minute, p.second) == dt.timetuple()[:6]
    assert p.millisecond == dt.microsecond // 1000
    assert p.day_of_year == dt.timetuple().tm_yday
    assert p.day_of_week == dt.isoweekday() % 7 + 1
    assert p.week == int(dt.strftime("%U"))
    assert (p.iso_year, p.iso_week, p.iso_day_of_week) == (iso.year, iso.week, iso.weekday)


@given(st.integers(-1_000_000, 1_000_000))
def test_civil_round_trip(days: int) -> None:
    assert dates.days_from_civil(*dates.civil_from_days(days)) == days


@given(st.integers(0, 4_000_000_000_000), st.integers(-14 * 60, 14 * 60))
def test_fixed_offset(ms: int, minutes: int) -> None:
    sign = "-" if minutes < 0 else "+"
    tz = dates.time_zone(f"{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}")
    local = datetime.datetime(1970, 1, 1) + datetime.timedelta(milliseconds=ms + minutes * 60_000)
    p = dates.parts_of(ms, tz)
    assert (p.year, p.month, p.day, p.hour, p.minute) == local.timetuple()[:5]
    assert tz.to_utc(ms + minutes * 60_000) == ms


@pytest.mark.parametrize(
    ("name", "offset_ms"),
    [("+05", 5 * 3_600_000), ("-0130", -90 * 60_000), ("+05:30", 330 * 60_000), ("UTC", 0)],
)
def test_offsets(name: str, offset_ms: int) -> None:
    assert dates.time_zone(name).offset_ms(0) == offset_ms


@pytest.mark.parametrize("name", ["+5", "+05:3", "+0530x", "", "Nowhere/City", "../etc/passwd"])
def test_unknown_zones(name: str) -> None:
    with pytest.raises(QueryError) as info:
        dates.time_zone(name)
    assert info.value.code_name == "Location40485"


PARSED: list[tuple[str, str | None, int]] = [
    ("2020-01-02", None, 1577923200000),
    ("2020-01-02T03:04:05.6Z", None, 1577934245600),
    ("2020-01-02 03:04", None, 1577934240000),
    ("2020-01-02T03:04:05-01:00", None, 1577937845000),
    ("2020/01/02", None, 1577923200000),
    ("02.01.2020", "%d.%m.%Y", 1577923200000),
    ("2020-032", "%Y-%j", 1580515200000),
    ("Jan 2 2020 +0100", "%b %d %Y %z", 1577919600000),
]


@pytest.mark.parametrize(("text", "fmt", "ms"), PARSED)
def test_parse(text: str, fmt: str | None, ms: int) -> None:
    assert dates.parse_date(text, dates.UTC, fmt) == ms


@pytest.mark.parametrize(
    ("text", "fmt"),
    [
        ("2020-02-30", None),
        ("2020-13-01", None),
        ("2020-01-02T25:00", None),
        ("x", None),
        ("2020", "%d"),
    ],
)
def test_parse_rejects(text: str, fmt: str | None) -> None:
    with pytest.raises(dates.DateParseError):
        dates.parse_date(text, dates.UTC, fmt)
