"""The memory calculator page: in Chromium, its parameters, gradients, optimizer state and activations per device
equal the what-if's ``device_memory`` for every model and many layouts; a layout the what-if refuses is refused in
its words; each bar is explained; one 1280 x 720 screen."""

import random

import pytest

from simulator.parallel.whatif.training_setup import SetupError
from simulator.views.web.memory_page import CHOICES, NAMES, START, memory_data, python_memory, write_memory_page
from tests.views.tool_pages import opened

KINDS = ("weights", "grads", "optimizer", "activations")
PYTHON = {"weights": "params", "grads": "grads", "optimizer": "optimizer", "activations": "activations"}


def settings(n=120, seed=4):
    """The page's start, each model at it, and ``n`` random choices (a fixed seed: the same every run)."""
    rng = random.Random(seed)
    out = [dict(START)] + [dict(START, model=name) for name in NAMES]
    for _ in range(n):
        out.append({"model": rng.choice(NAMES), **{k: rng.choice(v) for k, v in CHOICES.items()}})
    return out


def test_the_page_is_self_contained_and_small(tmp_path):
    from simulator.views.web.page import CSP

    html = write_memory_page(tmp_path / "memory.html").read_text()
    assert f'content="{CSP}"' in html and "http://" not in html.replace("http://www.w3.org/2000/svg", "")
    assert html.count("<script") == 2 and len(html) < 300_000
    assert [m["name"] for m in memory_data()["models"]] == list(NAMES)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = write_memory_page(tmp_path_factory.mktemp("memory") / "memory.html")
    with opened(path, ".mc") as driver:
        yield driver, path


@pytest.mark.browser
def test_the_page_s_numbers_are_the_what_if_s(page):
    driver, _ = page
    choices = settings()
    got = driver.execute_script("return arguments[0].map((c) => window.calculator.memory(c))", choices)
    compared = refused = 0
    for choice, shown in zip(choices, got):
        try:
            want = python_memory(choice)
        except SetupError as exc:
            assert shown["error"] == str(exc), choice  # refused in the what-if's words
            refused += 1
            continue
        assert "error" not in shown, (choice, shown)
        for kind in KINDS:
            assert shown[kind] == pytest.approx(getattr(want, PYTHON[kind]), rel=1e-12), (choice, kind)
        compared += 1
    assert compared >= 50 and refused >= 1


@pytest.mark.browser
def test_each_bar_is_explained_and_the_page_fits_one_screen(page):
    driver, path = page
    driver.get(
        path.resolve().as_uri() + "#model=gpt3-175b&tp=8&pp=1&dp=64&cp=1&zero=3&recompute=full&sp=true&microbatch=2"
    )
    shown = driver.execute_script(
        """
        const rows = [...document.querySelectorAll(".mc-row")];
        const fonts = [...document.querySelectorAll(".mc *")].filter((n) => [...n.childNodes].some((c) => c.nodeType === 3 && c.textContent.trim()))
          .map((n) => parseFloat(getComputedStyle(n).fontSize));
        return {
          kinds: rows.map((r) => r.dataset.kind), bytes: rows.map((r) => Number(r.dataset.bytes)),
          why: rows.map((r) => r.querySelector(".mc-why").textContent),
          verdict: document.querySelector(".mc-verdict").textContent,
          smallest: Math.min(...fonts),
          size: [document.documentElement.scrollWidth, document.documentElement.scrollHeight],
        };
        """
    )
    want = python_memory(
        {
            "model": "gpt3-175b",
            "tp": 8,
            "pp": 1,
            "dp": 64,
            "cp": 1,
            "zero": 3,
            "recompute": "full",
            "sp": True,
            "microbatch": 2,
        }
    )
    assert shown["kinds"] == list(KINDS)
    assert shown["bytes"] == pytest.approx([getattr(want, PYTHON[k]) for k in KINDS], rel=1e-12)
    assert "ZeRO-3 shards them over dp x cp = 64" in shown["why"][0] and "two layers gathered" in shown["why"][0]
    assert "only each layer's input" in shown["why"][3] and "pp = 1 microbatches" in shown["why"][3]
    assert shown["verdict"].startswith(f"{want.total / 1e9:.2f} GB on each device")
    # its room to spare is counted from the 85.5 GB an H100 80GB holds, which it says (not from 80)
    assert "fits an H100 80GB (85.5 GB usable), " in shown["verdict"]
    assert shown["size"] == [1280, 720] and shown["smallest"] >= 12


@pytest.mark.browser
def test_a_bad_link_says_what_is_wrong(page):
    driver, path = page
    driver.get(path.resolve().as_uri() + "#model=gpt5")
    assert driver.execute_script("return document.querySelector('.mc-error').textContent").startswith(
        'there is no model named "gpt5"'
    )
    driver.get(path.resolve().as_uri() + "#tp=3")
    assert "tp = 3 is not offered: choose one of 1, 2, 4, 8" in driver.execute_script(
        "return document.querySelector('.mc-error').textContent"
    )
