"""Solution to notebooks/exercises/06_1f1b_schedule.ipynb (each section replaces the cell with its tag)."""

# %% [predict-bubble]
ex.predict("bubble", 0.25)

# %% [predict-peak]
ex.predict("peak", 2)

# %% [starter]
rows = [
    "0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3",  # device 0: p - r = 2 warm-up forwards, then one backward per forward
    "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3",  # device 1, the last stage: a backward right after each forward
]
