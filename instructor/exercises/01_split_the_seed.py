"""Solution to notebooks/exercises/01_split_the_seed.ipynb.

Each section replaces the notebook cell with the same tag (the tests run the notebook with them).
"""

# %% [predict-returns]
ex.predict("returns", 49)

# %% [predict-messages]
ex.predict("messages", 1)

# %% [predict-bytes]
ex.predict("bytes", 8)


# %% [starter]
def split(dev, x):
    if dev.rank == 0:
        dev.hold("x", x)
        h = dev.compute("A", stage_a, x)
        dev.send(h, dst=1)  # A's output crosses the boundary
        return None
    h = dev.recv(src=0, name="A", shape=(1,), dtype=np.float64)  # the declared contract
    return dev.compute("B", stage_b, h)
