"""What the booked-ring tests share."""

import pytest

import simulator.collectives.booked as booked


@pytest.fixture
def bookings(monkeypatch):
    """How many calls were booked whole."""
    count = [0]
    book = booked._book

    def counting(*args):
        count[0] += 1
        return book(*args)

    monkeypatch.setattr(booked, "_book", counting)
    return count
