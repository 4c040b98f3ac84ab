"""One rule for digits (issue 38, item 7): ASCII only, wherever mcap reads a number."""
from __future__ import annotations

import math

import pytest

from mcap.core import numbers


@pytest.mark.parametrize("text,value", [("3", 3), (" 30 ", 30), ("-2", -2), ("+7", 7),
                                        ("0", 0), ("9" * 18, int("9" * 18))])
def test_whole_numbers_in_ascii_digits(text, value):
    assert numbers.whole(text) == value


@pytest.mark.parametrize("text", ["٣", "٣٠", "３", "²", "1_000", "3.0", "", " ", "0x10", "1e3",
                                  "9" * 19, "3 3", "--3"])
def test_anything_else_is_not_a_whole_number(text):
    assert numbers.whole(text) is None


@pytest.mark.parametrize("text,value", [("0.5", 0.5), ("3", 3.0), (".5", 0.5), ("1e-3", 1e-3),
                                        ("-2.5E2", -250.0), ("7.", 7.0)])
def test_real_numbers_in_ascii(text, value):
    assert numbers.real(text) == value


@pytest.mark.parametrize("text", ["١.٥", "٣", "1_0.5", "", ".", "e3", "1e", "0x1p3"])
def test_anything_else_is_not_a_real_number(text):
    assert numbers.real(text) is None


def test_infinities_and_nan_are_read_for_the_caller_to_refuse_by_name():
    assert math.isinf(numbers.real("inf")) and math.isnan(numbers.real("nan"))
