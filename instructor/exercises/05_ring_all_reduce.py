"""Solution to notebooks/exercises/05_ring_all_reduce.ipynb (each section replaces the cell with its tag)."""

# %% [predict-steps]
ex.predict("steps", 6)

# %% [predict-messages]
ex.predict("messages", 24)

# %% [predict-bytes]
ex.predict("bytes", 96)


# %% [starter]
def ring(dev, x):  # x: this device's own vector x[r]
    p, r = dev.world_size, dev.rank
    right, left = (r + 1) % p, (r - 1) % p
    chunks = list(np.split(dev.hold(f"x[{r}]", x), p))
    for s in range(p - 1):  # reduce-scatter: afterwards chunk (r + 1) % p holds the whole sum
        send_c, recv_c = (r - s) % p, (r - s - 1) % p
        dev.send(chunks[send_c], right, label=f"my ring reduce-scatter step {s}")
        got = dev.recv(left, shape=chunks[recv_c].shape, dtype=np.float64)
        chunks[recv_c] = dev.compute("add", np.add, got, chunks[recv_c], label="my ring")
    for s in range(p - 1):  # all-gather: pass the finished chunks on, replacing the stale ones
        send_c, recv_c = (r + 1 - s) % p, (r - s) % p
        dev.send(chunks[send_c], right, label=f"my ring all-gather step {s}")
        chunks[recv_c] = dev.recv(left, shape=chunks[recv_c].shape, dtype=np.float64)
    return dev.compute("v", np.concatenate, chunks)
