"""Solution to notebooks/exercises/06_1f1b_schedule.ipynb (each section replaces the cell with its tag)."""

# %% [predict-bubble]
ex.predict("bubble", 0.25)

# %% [predict-peak]
ex.predict("peak", 2)


# %% [starter]
def schedule(p, m):
    """1F1B: on rank r, p - r - 1 warm-up forwards, then one forward and one backward in turn, then the rest."""
    rows = []
    for r in range(p):
        warmup = min(p - r - 1, m)
        actions = [f"{r}F{i}" for i in range(warmup)]
        for j in range(m - warmup):
            actions += [f"{r}F{warmup + j}", f"{r}B{j}"]
        actions += [f"{r}B{j}" for j in range(m - warmup, m)]
        rows.append(" ".join(actions))
    return rows


schedule(2, 4)  # ["0F0 0F1 0B0 0F2 0B1 0F3 0B2 0B3", "1F0 1B0 1F1 1B1 1F2 1B2 1F3 1B3"]
