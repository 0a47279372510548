"""Declarative parameter constraints and the one function that checks them.

In the style of scikit-learn's ``_parameter_constraints``: a function or an estimator
declares, for each parameter, the list of constraints a valid value satisfies (any one of
them), and :func:`validate_params` checks the values against it. The error names the
parameter, the value and what it must be::

    _PARAMS = {
        "n_iter": [Interval(Integral, 0, None)],
        "method": [Options("ap", "dr", "none")],
        "seed": [Interval(Integral, 0, None), None],
    }
    validate_params(_PARAMS, {"n_iter": -1, "method": "ap", "seed": None})
    # ValueError: n_iter=-1: must be an integer >= 0

A constraint is one of:

* :class:`Interval`: a number of a kind (``Integral`` or ``Real``) within bounds; booleans are
  never numbers here;
* :class:`Options`: one of some values (compared with ``==``; strings, mostly);
* ``None``: the value None;
* ``"boolean"``: ``True`` or ``False`` (Python's or NumPy's);
* ``"path"``: a non-empty ``str`` or ``os.PathLike`` (not bytes);
* ``"words"``: a list or tuple of strings;
* ``"word_groups"``: a list or tuple whose items are strings or lists or tuples of strings.

A function declares its constraints once with the decorator :func:`validated`, which checks
the arguments of every call. Constraints that tie several parameters together
(``core_size > n_topics``), or a parameter to the data (``n_topics < V``), stay with their
owner, after :func:`validate_params`.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any, Literal, TypeAlias, TypeVar

import numpy as np

__all__ = ["Constraint", "Interval", "Options", "check_param", "validate_params", "validated"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Interval:
    """Numbers of ``kind`` between ``left`` and ``right`` (None: unbounded on that side).

    Parameters
    ----------
    kind : type
        ``numbers.Integral`` (NumPy integers included) or ``numbers.Real``.
    left, right : number or None
        The bounds.
    closed : {'left', 'right', 'both', 'neither'}
        Which bounds belong to the interval.
    """

    kind: type[Any]
    left: float | None
    right: float | None
    closed: Literal["left", "right", "both", "neither"] = "left"

    def accepts(self, value: Any) -> bool:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, self.kind):
            return False
        if self.left is not None:
            if value < self.left or (value == self.left and self.closed in ("right", "neither")):
                return False
        if self.right is not None:
            if value > self.right or (value == self.right and self.closed in ("left", "neither")):
                return False
        return not (self.kind is Real and value != value)  # NaN is in no interval

    def __str__(self) -> str:
        what = "an integer" if self.kind is Integral else "a number"
        bounds = []
        if self.left is not None:
            bounds.append((">=" if self.closed in ("left", "both") else ">") + f" {self.left}")
        if self.right is not None:
            bounds.append(("<=" if self.closed in ("right", "both") else "<") + f" {self.right}")
        return " ".join([what, " and ".join(bounds)]) if bounds else what


class Options:
    """One of ``values``."""

    def __init__(self, *values: Any) -> None:
        self.values = tuple(values)

    def accepts(self, value: Any) -> bool:
        try:
            return any(isinstance(value, type(v)) and value == v for v in self.values)
        except (TypeError, ValueError):  # an array compared with a string
            return False

    def __str__(self) -> str:
        shown = [repr(v) for v in self.values]
        return shown[0] if len(shown) == 1 else "one of " + ", ".join(shown)


#: One constraint of a parameter's list.
Constraint: TypeAlias = (Interval | Options | None
                         | Literal["boolean", "path", "words", "word_groups"])


def _accepts(constraint: Constraint, value: Any) -> bool:
    if constraint is None:
        return value is None
    if constraint == "boolean":
        return isinstance(value, (bool, np.bool_))
    if constraint == "path":
        return isinstance(value, (str, os.PathLike)) and bool(os.fspath(value))
    if constraint == "words":
        return isinstance(value, (list, tuple)) and all(isinstance(w, str) for w in value)
    if constraint == "word_groups":
        return isinstance(value, (list, tuple)) and all(
            isinstance(g, str) or _accepts("words", g) for g in value)
    assert isinstance(constraint, (Interval, Options)), constraint
    return constraint.accepts(value)


def _describe(constraint: Constraint) -> str:
    if constraint is None:
        return "None"
    if constraint == "boolean":
        return "a boolean"
    if constraint == "path":
        return "a path"
    if constraint == "words":
        return "a list of words"
    if constraint == "word_groups":
        return "a list of words or of lists of words"
    return str(constraint)


def check_param(name: str, value: Any, constraints: Sequence[Constraint]) -> None:
    """Check one value against its constraints (any one suffices).

    Raises
    ------
    ValueError
        ``name=value: must be <what each constraint accepts, joined by 'or'>``.
    """
    if any(_accepts(c, value) for c in constraints):
        return
    wanted = [_describe(c) for c in constraints]
    what = wanted[0] if len(wanted) == 1 else ", ".join(wanted[:-1]) + " or " + wanted[-1]
    raise ValueError(f"{name}={value!r}: must be {what}")


def validate_params(constraints: Mapping[str, Sequence[Constraint]],
                    params: Mapping[str, Any]) -> None:
    """Check every parameter of ``params`` that ``constraints`` declares, in the
    declaration's order (the first invalid one is reported).

    Parameters
    ----------
    constraints : mapping of str to list of constraints
        Per parameter, the constraints a valid value satisfies (any one of them).
    params : mapping of str to value
        The values; names without constraints are not checked.

    Raises
    ------
    ValueError
        Naming the first invalid parameter and its value (:func:`check_param`).
    """
    for name, allowed in constraints.items():
        if name in params:
            check_param(name, params[name], allowed)


def validated(constraints: Mapping[str, Sequence[Constraint]]) -> Callable[[F], F]:
    """Decorate a function so that every call checks its arguments (defaults included)
    against ``constraints`` (:func:`validate_params`) before it runs.

    Examples
    --------
    >>> @validated({"n_iter": [Interval(Integral, 0, None)]})
    ... def run(n_iter: int = 15) -> int:
    ...     return n_iter
    >>> run(-1)
    Traceback (most recent call last):
    ValueError: n_iter=-1: must be an integer >= 0
    """
    def decorate(f: F) -> F:
        signature = inspect.signature(f)
        unknown = set(constraints) - set(signature.parameters)
        assert not unknown, f"{f.__name__} has no parameter {', '.join(sorted(unknown))}"

        @functools.wraps(f)
        def checked(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            validate_params(constraints, bound.arguments)
            return f(*args, **kwargs)

        return checked  # type: ignore[return-value]

    return decorate
