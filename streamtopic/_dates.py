"""Dates of documents: a document's time field read as a point in time, and calendar slices.

:func:`parse_time` reads the value of a time field (a JSON Lines field, an HDF5 column, a
mail/news header, a file's modification time) as seconds since 1970-01-01 00:00 UTC:

* an integer from 0 to 9999 (or a string of 1 to 4 digits) is a **year** (its 1 January);
* any other number (or string of digits, with an optional fraction) is **Unix time** in
  seconds;
* a string in ISO 8601: ``YYYY-MM``, ``YYYY-MM-DD``, ``YYYY-MM-DDTHH:MM[:SS[.fff]]`` with
  an optional ``Z`` or ``±HH:MM`` offset (a date-time without one is taken as UTC);
* a string in the form of e-mail and news ``Date`` headers (RFC 2822), e.g.
  ``Mon, 5 Apr 1993 12:01:22 GMT``.

Anything else is refused with a :class:`ValueError` saying what was found.
"""

from __future__ import annotations

import datetime as dt
import re
from email.utils import parsedate_to_datetime
from typing import Any, cast

import numpy as np

__all__ = ["BY", "parse_time", "calendar_floor", "next_calendar", "time_label"]

#: The calendar units a timeline slices by.
BY = ("year", "month", "day")
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
_YEAR = re.compile(r"[0-9]{1,4}")
_NUMBER = re.compile(r"[+-]?[0-9]+(\.[0-9]*)?")
_YEAR_MONTH = re.compile(r"([0-9]{4})-([0-9]{2})")


def _seconds(when: dt.datetime) -> int:
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int((when - _EPOCH) // dt.timedelta(seconds=1))


def _year(y: int) -> int:
    return _seconds(dt.datetime(max(int(y), 1), 1, 1))


def parse_time(value: Any) -> int:
    """Seconds since 1970-01-01 UTC of a time field's ``value`` (see the module docstring).

    Raises
    ------
    ValueError
        For a value that is none of the accepted forms (the message quotes it).
    """
    if isinstance(value, (bytes, np.bytes_)):
        value = bytes(value).decode("utf-8", "replace")
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or value is None:
        raise ValueError(f"{value!r} is not a date")
    if isinstance(value, int):
        return _year(value) if 0 <= value <= 9999 else value
    if isinstance(value, float):
        if not np.isfinite(value):
            raise ValueError(f"{value!r} is not a date")
        return int(np.floor(value))
    if not isinstance(value, str):
        raise ValueError(f"{value!r} ({type(value).__name__}) is not a date")
    text = value.strip()
    if _YEAR.fullmatch(text):
        return _year(int(text))
    if _NUMBER.fullmatch(text):
        return int(np.floor(float(text)))
    m = _YEAR_MONTH.fullmatch(text)
    if m:
        try:
            return _seconds(dt.datetime(int(m[1]), int(m[2]), 1))
        except ValueError:
            pass
    else:
        iso = text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text
        try:
            return _seconds(dt.datetime.fromisoformat(iso))
        except ValueError:
            pass
        try:
            return _seconds(parsedate_to_datetime(text))
        except (TypeError, ValueError, IndexError):
            pass
    shown = text if len(text) <= 40 else text[:37] + "..."
    raise ValueError(f"{shown!r} is not a date (expected a year, Unix time, ISO 8601 such as "
                     "2001-09-11 or an e-mail Date such as 'Tue, 11 Sep 2001 08:46:00 EDT')")


def calendar_floor(seconds: np.ndarray, by: str) -> np.ndarray:
    """The start of the calendar ``by`` unit (year, month or day; UTC) of each time (n,),
    as datetime64[D] (n,)."""
    days = np.asarray(seconds, dtype="datetime64[s]").astype("datetime64[D]")
    if by == "day":
        return days
    unit = {"year": "datetime64[Y]", "month": "datetime64[M]"}[by]
    return days.astype(unit).astype("datetime64[D]")


def next_calendar(start: np.datetime64, by: str) -> np.datetime64:
    """The start of the ``by`` unit after the one starting at ``start`` (datetime64[D])."""
    code = {"year": "Y", "month": "M", "day": "D"}[by]
    following: Any = start.astype(f"datetime64[{code}]") + 1
    return cast("np.datetime64", following.astype("datetime64[D]"))


def time_label(start: np.datetime64, end: np.datetime64, by: str | None) -> str:
    """A slice's name: its year, month or day for a calendar unit, else its first and last
    day (``end`` exclusive)."""
    if by == "year":
        return str(start.astype("datetime64[Y]"))
    if by == "month":
        return str(start.astype("datetime64[M]"))
    last = end - np.timedelta64(1, "D")
    return str(start) if last <= start else f"{start}…{last}"
