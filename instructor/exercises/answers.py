"""The answers to the exercises' predictions, in plain words (for teachers; not in the package).

The package keeps only a digest of each answer and its explanation sealed with it
(``simulator.teach.exercises.sealed``); ``tests/teach/test_exercises.py`` checks that they match these. After
changing an answer or its explanation, run ``python instructor/exercises/answers.py`` and paste the sealed
forms it prints into the exercise's module.
"""

from __future__ import annotations

# exercise -> question key -> (answer, why it is the answer)
ANSWERS = {
    "split-the-seed": {
        "returns": (
            49.0,
            "A = 2 * 3 + 1 = 7 crosses the boundary and B squares it: 49, exactly what one device computes.",
        ),
        "messages": (1, "One: A's output, from device 0 to device 1. Nothing else needs to cross."),
        "bytes": (8, "A is one float64: 8 bytes. The boundary's contract is shape (1,), dtype float64."),
    },
    "raw-input-bug": {
        "returns": (9.0, "9: device 0 sends x = 3, not A's output 7, and B squares what it is given. B is not wrong."),
        "message": (
            0,
            "Message #0, the only one: the first place the run differs from one device is the value that crosses, "
            "before B ever runs.",
        ),
    },
    "column-split": {
        "columns": (
            3,
            "Three: column j of Y needs only column j of W (and all of X), so a device with three of W's columns "
            "computes those three columns of Y, with no message.",
        ),
        "messages": (
            2,
            "Two: each device sends its block to the other (a ring of two: p - 1 = 1 step, one message each).",
        ),
    },
    "row-split": {
        "shape": (
            (2, 6),
            "(2, 6), the whole shape of Y: each device sums over half of the inner dimension, so each product is "
            "one term of Y = X[:, 0:2] @ W[0:2] + X[:, 2:4] @ W[2:4].",
        ),
        "messages": (
            4,
            "Four: 2(p - 1) = 2 steps on each of the 2 devices (a reduce-scatter step, then an all-gather step), "
            "one message per device per step.",
        ),
        "bytes": (96, "2(p - 1)/p x 96 = 96 bytes: half of Y in the reduce-scatter step, half in the all-gather step."),
    },
    "ring-all-reduce": {
        "steps": (
            6,
            "2(p - 1) = 6: p - 1 = 3 steps to finish one chunk's sum on each device, 3 more to pass the finished "
            "chunks around.",
        ),
        "messages": (24, "Each of the 4 devices sends one chunk in each of the 6 steps: 24."),
        "bytes": (
            96,
            "2(p - 1)/p x 64 = 96: six chunks of 16 bytes. The same for any p: the ring uses every link fully.",
        ),
    },
    "1f1b-schedule": {
        "bubble": (
            0.25,
            "(p - 1)/m = 1/4: each device idles for p - 1 forwards and p - 1 backwards in all, and is busy for m of "
            "each. GPipe's bubble is the same; what 1F1B saves is memory.",
        ),
        "peak": (2, "p - r = 2 for device 0: after its warm-up forwards it runs one backward for every forward."),
    },
    "data-parallel-average": {
        "factor": (
            2,
            "2, the number of replicas: each local mean is already divided by 4 rows, so the sum is twice the mean "
            "over 8 rows. An average (sum, then divide by the replicas) fixes it.",
        ),
        "messages": (4, "4: two steps on each replica (one chunk each), whatever the size; chunks of 2 and 1 numbers."),
    },
    "zero-1-step": {
        "state": (
            32,
            "64 bytes in all, split in 2: 32 each. Each device updates only its own half of the parameters.",
        ),
        "messages": (2, "2: each device sends its half of the updated parameters to the other."),
    },
}


def sealed_forms() -> dict[str, dict[str, tuple[str, str]]]:
    """exercise -> key -> (digest, sealed why): what each exercise's module keeps."""
    from simulator.teach.exercises.sealed import digest, seal

    return {
        ex: {key: (digest(ex, key, answer), seal(ex, key, answer, why)) for key, (answer, why) in qs.items()}
        for ex, qs in ANSWERS.items()
    }


if __name__ == "__main__":
    for ex, qs in sealed_forms().items():
        print(ex)
        for key, (d, s) in qs.items():
            print(f"    {key!r}: ({d!r}, {s!r}),")
