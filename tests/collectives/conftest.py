"""What the booked-ring tests share."""

import pytest

import simulator.collectives.booked as booked


@pytest.fixture
def count_calls(monkeypatch):
    """``count_calls(module, name)``: a one-element list counting the calls of ``module.name`` during the test."""

    def count(module, name: str) -> list[int]:
        calls = [0]
        original = getattr(module, name)

        def counting(*args):
            calls[0] += 1
            return original(*args)

        monkeypatch.setattr(module, name, counting)
        return calls

    return count


@pytest.fixture
def bookings(count_calls):
    """How many calls were booked whole."""
    return count_calls(booked, "_book")
