"""Calendar arithmetic on BSON dates (milliseconds since the epoch) for the aggregation expressions:
time zones, date parts, formatting and parsing, and the unit arithmetic behind $dateAdd, $dateDiff
and $dateTrunc. Proleptic Gregorian over the whole int64 range, which `datetime` cannot span."""

from __future__ import annotations

import datetime
import re
import zoneinfo
from collections.abc import Callable, Container
from dataclasses import dataclass

from ebbdb.storage.core.errors import QueryError

MS_PER_SECOND = 1000
MS_PER_MINUTE = 60 * MS_PER_SECOND
MS_PER_HOUR = 60 * MS_PER_MINUTE
MS_PER_DAY = 24 * MS_PER_HOUR

#: The format $dateToString and $toString use when none is given.
ISO_FORMAT = "%Y-%m-%dT%H:%M:%S.%LZ"

MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)

TIME_UNITS = ("year", "quarter", "month", "week", "day", "hour", "minute", "second", "millisecond")
_FIXED_UNITS = {
    "millisecond": 1,
    "second": MS_PER_SECOND,
    "minute": MS_PER_MINUTE,
    "hour": MS_PER_HOUR,
}
# Sunday is 0, as `Parts.day_of_week - 1` counts.
_WEEKDAYS = {
    "sunday": 0,
    "monday": 1,
    "tuesday": 2,
    "wednesday": 3,
    "thursday": 4,
    "friday": 5,
    "saturday": 6,
}


# -- civil calendar ----------------------------------------------------------------------------------


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (month 1-12; any day offset)."""
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of a count of days since 1970-01-01."""
    z = days + 719468
    era = z // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def days_in_month(year: int, month: int) -> int:
    if month == 12:
        return 31
    return days_from_civil(year, month + 1, 1) - days_from_civil(year, month, 1)


def _iso_monday_of_week_one(year: int) -> int:
    jan4 = days_from_civil(year, 1, 4)
    return jan4 - (jan4 + 3) % 7


@dataclass(frozen=True, slots=True)
class Parts:
    """A date's fields in some time zone. `day_of_week` is 1 (Sunday) to 7 (Saturday) as $dayOfWeek
    counts; the ISO fields count weeks from Monday."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    millisecond: int
    day_of_week: int
    day_of_year: int
    iso_year: int
    iso_week: int
    iso_day_of_week: int
    week: int  # strftime's %U: weeks start on Sunday, days before the first Sunday are week 0
    offset_ms: int


def parts_of(ms: int, tz: TimeZone) -> Parts:
    offset = tz.offset_ms(ms)
    days, in_day = divmod(ms + offset, MS_PER_DAY)
    year, month, day = civil_from_days(days)
    day_of_week = (days + 4) % 7 + 1
    day_of_year = days - days_from_civil(year, 1, 1) + 1
    iso_day = (days + 3) % 7 + 1
    thursday = days - iso_day + 4
    iso_year = civil_from_days(thursday)[0]
    iso_week = (thursday - days_from_civil(iso_year, 1, 1)) // 7 + 1
    week = (day_of_year - 1 + 7 - (day_of_week - 1)) // 7
    return Parts(
        year=year,
        month=month,
        day=day,
        hour=in_day // MS_PER_HOUR,
        minute=in_day // MS_PER_MINUTE % 60,
        second=in_day // MS_PER_SECOND % 60,
        millisecond=in_day % MS_PER_SECOND,
        day_of_week=day_of_week,
        day_of_year=day_of_year,
        iso_year=iso_year,
        iso_week=iso_week,
        iso_day_of_week=iso_day,
        week=week,
        offset_ms=offset,
    )


def local_ms(year: int, month: int, day: int, hour: int, minute: int, second: int, ms: int) -> int:
    """Milliseconds of a wall-clock time, normalising out-of-range fields as timelib does
    (month 13 is January of the next year, day 0 the last day of the previous month, ...)."""
    year += (month - 1) // 12
    month = (month - 1) % 12 + 1
    days = days_from_civil(year, month, 1) + day - 1
    return days * MS_PER_DAY + hour * MS_PER_HOUR + minute * MS_PER_MINUTE + second * 1000 + ms


def iso_local_ms(
    iso_year: int, iso_week: int, iso_day: int, hour: int, minute: int, second: int, ms: int
) -> int:
    days = _iso_monday_of_week_one(iso_year) + (iso_week - 1) * 7 + iso_day - 1
    return days * MS_PER_DAY + hour * MS_PER_HOUR + minute * MS_PER_MINUTE + second * 1000 + ms


# -- time zones --------------------------------------------------------------------------------------

# The span of instants zoneinfo can place; offsets outside it are taken from its ends.
_MIN_SECONDS = -62135596800 + 86400
_MAX_SECONDS = 253402300799 - 86400
_OFFSET = re.compile(r"([+-])([0-9]{2})(?::?([0-9]{2}))?")


class TimeZone:
    """UTC, a fixed offset, or an IANA zone. `name` is what the client gave."""

    __slots__ = ("name", "_fixed", "_zone")

    def __init__(
        self, name: str, fixed_ms: int | None, zone: zoneinfo.ZoneInfo | None = None
    ) -> None:
        self.name = name
        self._fixed = fixed_ms
        self._zone = zone

    @property
    def is_utc(self) -> bool:
        return self._zone is None and self._fixed == 0

    def offset_ms(self, utc_ms: int) -> int:
        if self._zone is None:
            return self._fixed or 0
        seconds = min(max(utc_ms // 1000, _MIN_SECONDS), _MAX_SECONDS)
        local = datetime.datetime.fromtimestamp(seconds, self._zone)
        delta = local.utcoffset() or datetime.timedelta()
        return (delta.days * 86400 + delta.seconds) * 1000

    def to_utc(self, wall_ms: int) -> int:
        """The instant a wall-clock time in this zone names (the later reading across a gap)."""
        guess = wall_ms - self.offset_ms(wall_ms)
        return wall_ms - self.offset_ms(guess)


UTC = TimeZone("UTC", 0)


def parse_offset(spec: str) -> int | None:
    """MongoDB's parseUtcOffset: "+HH", "+HHMM" or "+HH:MM" (or "-") as milliseconds."""
    m = _OFFSET.fullmatch(spec)
    if m is None or (m.group(3) is None and len(spec) != 3):
        return None
    if m.group(3) is not None and len(spec) not in (5, 6):
        return None
    total = int(m.group(2)) * 60 + int(m.group(3) or 0)
    return (-total if m.group(1) == "-" else total) * MS_PER_MINUTE


def time_zone(name: str) -> TimeZone:
    """A time zone by its identifier, or error 40485 as MongoDB reports an unknown one."""
    if name == "UTC":
        return UTC
    fixed = parse_offset(name)
    if fixed is not None:
        return TimeZone(name, fixed)
    if name and "\0" not in name and not name.startswith(("/", ".")) and ".." not in name:
        try:
            return TimeZone(name, None, zoneinfo.ZoneInfo(name))
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
    raise QueryError("Location40485", f'unrecognized time zone identifier: "{name}"')


# -- formatting --------------------------------------------------------------------------------------


def _pad(n: int, width: int) -> str:
    return f"-{-n:0{width}d}" if n < 0 else f"{n:0{width}d}"


def _offset_hhmm(p: Parts) -> str:
    minutes = abs(p.offset_ms) // MS_PER_MINUTE
    return f"{'-' if p.offset_ms < 0 else '+'}{minutes // 60:02d}{minutes % 60:02d}"


def _offset_minutes(p: Parts) -> str:
    minutes = abs(p.offset_ms) // MS_PER_MINUTE
    return f"{'-' if p.offset_ms < 0 else '+'}{minutes}"


#: $dateToString's specifiers (after the `%`), each with how it renders the date's parts.
_RENDER: dict[str, Callable[[Parts], str]] = {
    "%": lambda p: "%",
    "Y": lambda p: _pad(p.year, 4),
    "G": lambda p: _pad(p.iso_year, 4),
    "m": lambda p: _pad(p.month, 2),
    "d": lambda p: _pad(p.day, 2),
    "H": lambda p: _pad(p.hour, 2),
    "M": lambda p: _pad(p.minute, 2),
    "S": lambda p: _pad(p.second, 2),
    "L": lambda p: _pad(p.millisecond, 3),
    "j": lambda p: _pad(p.day_of_year, 3),
    "w": lambda p: str(p.day_of_week),
    "u": lambda p: str(p.iso_day_of_week),
    "U": lambda p: _pad(p.week, 2),
    "V": lambda p: _pad(p.iso_week, 2),
    "b": lambda p: MONTH_NAMES[p.month - 1][:3],
    "B": lambda p: MONTH_NAMES[p.month - 1],
    "z": _offset_hhmm,
    "Z": _offset_minutes,
}


def validate_format(fmt: str) -> None:
    _check_format(fmt, _RENDER)


def _check_format(fmt: str, specifiers: Container[str]) -> None:
    """A format string's `%` specifiers must be `%%` or one of `specifiers`."""
    i, n = 0, len(fmt)
    while i < n:
        if fmt[i] == "%":
            if i + 1 == n:
                raise QueryError("Location18535", "Unmatched '%' at end of format string")
            c = fmt[i + 1]
            if c != "%" and c not in specifiers:
                raise QueryError(
                    "Location18536", f"Invalid format character '%{c}' in format string"
                )
            i += 2
        else:
            i += 1


def format_date(fmt: str, ms: int, tz: TimeZone) -> str:
    """$dateToString's rendering of a validated format."""
    p = parts_of(ms, tz)
    out: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c != "%" or i + 1 == n:
            out.append(c)
            i += 1
            continue
        s = fmt[i + 1]
        i += 2
        render = _RENDER.get(s)
        out.append("%" + s if render is None else render(p))
    return "".join(out)


# -- parsing -----------------------------------------------------------------------------------------


class DateParseError(Exception):
    """A date string that does not parse; the caller reports it as ConversionFailure."""


_ISO = re.compile(
    r"\s*(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})"
    r"(?:[T ]\s*(?P<H>[0-9]{1,2}):(?P<M>[0-9]{2})"
    r"(?::(?P<S>[0-9]{2})(?:[.,](?P<f>[0-9]+))?)?)?"
    r"\s*(?P<tz>Z|UTC|GMT|[+-][0-9]{2}(?::?[0-9]{2})?)?\s*",
    re.IGNORECASE,
)
_SLASHED = re.compile(r"\s*(?P<y>[0-9]{4})/(?P<m>[0-9]{1,2})/(?P<d>[0-9]{1,2})\s*")


def _tz_offset_ms(text: str) -> int:
    if text.upper() in ("Z", "UTC", "GMT"):
        return 0
    sign = -1 if text[0] == "-" else 1
    digits = text[1:].replace(":", "")
    hours = int(digits[:2])
    minutes = int(digits[2:4] or 0)
    return sign * (hours * 60 + minutes) * MS_PER_MINUTE


def parse_date(text: str, tz: TimeZone, fmt: str | None = None) -> int:
    """$dateFromString (and $convert to date): an ISO 8601 date and time, or one in a
    $dateFromString format. Raises DateParseError with MongoDB's message."""
    if fmt is not None:
        fields, offset = _parse_with_format(text, fmt)
    else:
        m = _ISO.fullmatch(text) or _SLASHED.fullmatch(text)
        if m is None:
            raise DateParseError(f"Error parsing date string '{text}'")
        groups = m.groupdict()
        fraction = groups.get("f") or ""
        fields = {
            "Y": int(groups["y"]),
            "m": int(groups["m"]),
            "d": int(groups["d"]),
            "H": int(groups.get("H") or 0),
            "M": int(groups.get("M") or 0),
            "S": int(groups.get("S") or 0),
            "L": int((fraction + "000")[:3]),
        }
        tz_text = groups.get("tz")
        offset = None if tz_text is None else _tz_offset_ms(tz_text)
    if offset is not None and not tz.is_utc:
        raise DateParseError(
            "you cannot pass in a date/time string with GMT offset together with a timezone "
            "argument"
        )
    _check_fields(text, fields)
    if "G" in fields:
        wall = iso_local_ms(
            fields["G"],
            fields.get("V", 1),
            fields.get("u", 1),
            fields.get("H", 0),
            fields.get("M", 0),
            fields.get("S", 0),
            fields.get("L", 0),
        )
    else:
        if not all(k in fields for k in "Ymd"):
            raise DateParseError(
                f'an incomplete date/time string has been found, with elements missing: "{text}"'
            )
        wall = local_ms(
            fields["Y"],
            fields["m"],
            fields["d"],
            fields.get("H", 0),
            fields.get("M", 0),
            fields.get("S", 0),
            fields.get("L", 0),
        )
    if offset is not None:
        return wall - offset
    return tz.to_utc(wall)


_FORMAT_PATTERNS = {
    "Y": r"([0-9]{4})",
    "G": r"([0-9]{4})",
    "m": r"([0-9]{1,2})",
    "d": r"([0-9]{1,2})",
    "H": r"([0-9]{1,2})",
    "M": r"([0-9]{1,2})",
    "S": r"([0-9]{1,2})",
    "L": r"([0-9]{1,3})",
    "j": r"([0-9]{1,3})",
    "u": r"([0-9])",
    "V": r"([0-9]{1,2})",
    "z": r"(Z|[+-][0-9]{2}(?::?[0-9]{2})?)",
    "Z": r"([+-][0-9]+)",
    "b": r"([A-Za-z]{3})",
    "B": r"([A-Za-z]+)",
}


def validate_parse_format(fmt: str) -> None:
    _check_format(fmt, _FORMAT_PATTERNS)


def _check_fields(text: str, fields: dict[str, int]) -> None:
    """Reject impossible dates and times, as timelib does, rather than roll them over."""
    if "j" in fields:
        year = fields.get("Y", 1970)
        if not 1 <= fields["j"] <= days_from_civil(year + 1, 1, 1) - days_from_civil(year, 1, 1):
            raise DateParseError(f"Error parsing date string '{text}'")
        fields["m"], fields["d"] = civil_from_days(
            days_from_civil(year, 1, 1) + fields.pop("j") - 1
        )[1:]
    bad = (
        not 1 <= fields.get("m", 1) <= 12
        or fields.get("H", 0) > 23
        or fields.get("M", 0) > 59
        or fields.get("S", 0) > 59
        or (
            "Y" in fields
            and not 1 <= fields.get("d", 1) <= days_in_month(fields["Y"], fields.get("m", 1))
        )
    )
    if bad:
        raise DateParseError(f"Error parsing date string '{text}'")


def _parse_with_format(text: str, fmt: str) -> tuple[dict[str, int], int | None]:
    pattern: list[str] = []
    order: list[str] = []
    i, n = 0, len(fmt)
    while i < n:
        c = fmt[i]
        if c == "%" and i + 1 < n:
            s = fmt[i + 1]
            i += 2
            if s == "%":
                pattern.append("%")
            else:
                pattern.append(_FORMAT_PATTERNS[s])
                order.append(s)
        else:
            pattern.append(re.escape(c))
            i += 1
    m = re.fullmatch("".join(pattern), text)
    if m is None:
        raise DateParseError(f"Error parsing date string '{text}'")
    fields: dict[str, int] = {}
    offset: int | None = None
    for spec, value in zip(order, m.groups()):
        if spec == "z":
            offset = _tz_offset_ms(value)
        elif spec == "Z":
            offset = int(value) * MS_PER_MINUTE
        elif spec in ("b", "B"):
            month = _month_number(value, spec == "b")
            if month is None:
                raise DateParseError(f"Error parsing date string '{text}'")
            fields["m"] = month
        else:
            fields[spec] = int(value)
    return fields, offset


def _month_number(name: str, abbreviated: bool) -> int | None:
    lowered = name.lower()
    for i, full in enumerate(MONTH_NAMES):
        if lowered == (full[:3] if abbreviated else full).lower():
            return i + 1
    return None


# -- units: $dateAdd, $dateDiff, $dateTrunc ----------------------------------------------------------


def is_time_unit(unit: str) -> bool:
    return unit in TIME_UNITS


def day_of_week(name: str) -> int | None:
    """A startOfWeek name ("monday", "mon", any case) as 0 (Sunday) to 6, or None."""
    lowered = name.lower()
    for full, n in _WEEKDAYS.items():
        if lowered in (full, full[:3]):
            return n
    return None


def _add_months(ms: int, months: int, tz: TimeZone) -> int:
    wall = ms + tz.offset_ms(ms)
    days, in_day = divmod(wall, MS_PER_DAY)
    year, month, day = civil_from_days(days)
    total = year * 12 + month - 1 + months
    year, month = divmod(total, 12)
    month += 1
    day = min(day, days_in_month(year, month))
    return tz.to_utc(days_from_civil(year, month, day) * MS_PER_DAY + in_day)


def date_add(ms: int, unit: str, amount: int, tz: TimeZone) -> int:
    """$dateAdd: fixed units add elapsed time; days and weeks move the wall clock in `tz`;
    months, quarters and years keep the time of day and clamp the day to the month's last."""
    if unit in _FIXED_UNITS:
        return ms + amount * _FIXED_UNITS[unit]
    if unit in ("day", "week"):
        days = amount * (7 if unit == "week" else 1)
        wall = ms + tz.offset_ms(ms) + days * MS_PER_DAY
        return tz.to_utc(wall)
    months = amount * {"month": 1, "quarter": 3, "year": 12}[unit]
    return _add_months(ms, months, tz)


def date_diff(start: int, end: int, unit: str, tz: TimeZone, start_of_week: int = 0) -> int:
    """$dateDiff: how many unit boundaries lie between the two instants, in `tz`'s calendar."""
    if unit == "millisecond":
        return end - start
    ws = start + tz.offset_ms(start)
    we = end + tz.offset_ms(end)
    if unit in _FIXED_UNITS:
        size = _FIXED_UNITS[unit]
        return we // size - ws // size
    ds, de = ws // MS_PER_DAY, we // MS_PER_DAY
    if unit == "day":
        return de - ds
    if unit == "week":
        return (de + 4 - start_of_week) // 7 - (ds + 4 - start_of_week) // 7
    ys, ms_, _ = civil_from_days(ds)
    ye, me, _ = civil_from_days(de)
    if unit == "month":
        return (ye * 12 + me) - (ys * 12 + ms_)
    if unit == "quarter":
        return (ye * 4 + (me - 1) // 3) - (ys * 4 + (ms_ - 1) // 3)
    return ye - ys


_REFERENCE_DAY = days_from_civil(2000, 1, 1)


def date_trunc(ms: int, unit: str, bin_size: int, tz: TimeZone, start_of_week: int = 0) -> int:
    """$dateTrunc: the start of the bin holding `ms`, bins counted from 2000-01-01 in `tz`."""
    wall = ms + tz.offset_ms(ms)
    if unit in _FIXED_UNITS:
        size = _FIXED_UNITS[unit] * bin_size
        ref = _REFERENCE_DAY * MS_PER_DAY
        start = ref + (wall - ref) // size * size
        return tz.to_utc(start)
    days = wall // MS_PER_DAY
    if unit in ("day", "week"):
        if unit == "day":
            ref_day, size_days = _REFERENCE_DAY, bin_size
        else:
            # The first start-of-week day on or after the reference day.
            ref_day = _REFERENCE_DAY + (start_of_week - (_REFERENCE_DAY + 4)) % 7
            size_days = 7 * bin_size
        start_day = ref_day + (days - ref_day) // size_days * size_days
        return tz.to_utc(start_day * MS_PER_DAY)
    year, month, _ = civil_from_days(days)
    months = (year - 2000) * 12 + month - 1
    size_months = bin_size * {"month": 1, "quarter": 3, "year": 12}[unit]
    start_month = months // size_months * size_months
    y, m = divmod(start_month, 12)
    return tz.to_utc(days_from_civil(2000 + y, m + 1, 1) * MS_PER_DAY)


__all__ = [
    "ISO_FORMAT",
    "MS_PER_DAY",
    "UTC",
    "DateParseError",
    "Parts",
    "TimeZone",
    "date_add",
    "date_diff",
    "date_trunc",
    "day_of_week",
    "format_date",
    "is_time_unit",
    "iso_local_ms",
    "local_ms",
    "parse_date",
    "parts_of",
    "time_zone",
    "validate_format",
    "validate_parse_format",
]
