"""Solution to notebooks/exercises/08_zero_1_step.ipynb (each section replaces the cell with its tag)."""

# %% [predict-state]
ex.predict("state", 32)

# %% [predict-messages]
ex.predict("messages", 2)


# %% [starter]
def zero1_step(dev, p, g, m):
    half = np.s_[4 * dev.rank : 4 * dev.rank + 4]
    p = dev.hold("p", p)
    g = dev.hold("g", g)
    m = dev.hold("m", m[half], index=half)  # only this device's half of the optimizer state
    m_new = dev.compute("m.new", lambda m, g: BETA * m + g, m, g[half], index=half)
    p_new = dev.compute("p.new", lambda p, m: p - LR * m, p[half], m_new, index=half)
    return dev.all_gather(p_new, axis=0, name="p.new")  # every device gets every parameter again
