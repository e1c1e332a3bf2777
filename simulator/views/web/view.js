// The step-through view of a run: one card per device (what it holds), the messages in flight as
// arrows from sender to receiver, the timeline with a cursor, the current event in words, and the
// check's first divergence in red. It draws a view document (simulator/views/web/document.py) and is the
// one module both front ends use: the notebook widget (anywidget calls the default export's render)
// and the self-contained page (which inlines the module and calls mount).
//
// Two modes: the default, for a notebook or a desk (every value on every card, the page scrolls), and the
// projector mode (options.present), which fits one screen: cards on the mesh's grid showing what changed
// (cards.js), larger type, the timeline always in view.
//
// Memory is replayed, not stored per step: each event says what it does (mem: +1 puts its value in
// device r's memory under its name, -1 drops it; fly: +1 a message leaves, -1 it is received). A
// snapshot every KEYFRAME events makes any jump replay at most that many.
//
// The last part of one ES module (see assets.py): dom.js, timeline.js and cards.js come before it.

const KEYFRAME = 256;
const MAX_LABELLED_ARROWS = 12; // more arrows than this are drawn without their value labels
const SPEEDS = [1, 4, 16, 64]; // steps per second when playing
const KEYS_HELP = "keys: \u2190 \u2192 step (shift: 10), Home / End, D the first divergence, space play; F11 full screen";

// ---- replay ------------------------------------------------------------------------------------

function makeReplay(doc) {
  const events = doc.events;
  const base = doc.base;
  const steps = events.length - base;
  const initial = () => ({
    mem: doc.initial.mem.map((held) => new Map(held)),
    fly: new Map(doc.initial.fly.map((i) => [events[i].m, i])),
  });
  const clone = (s) => ({ mem: s.mem.map((m) => new Map(m)), fly: new Map(s.fly) });
  const apply = (s, i) => {
    const e = events[i];
    if (e.fly === 1) s.fly.set(e.m, i);
    else if (e.fly === -1) s.fly.delete(e.m);
    if (e.mem === 1) s.mem[e.r].set(e.n, i);
    else if (e.mem === -1) s.mem[e.r].delete(e.n);
  };
  const keys = [];
  const s = initial();
  keys.push(clone(s));
  for (let k = 0; k < steps; k++) {
    apply(s, base + k);
    if ((k + 1) % KEYFRAME === 0) keys.push(clone(s));
  }
  return {
    steps,
    apply: (state, step) => apply(state, base + step), // the event that leads from step to step + 1
    at(step) {
      const k = Math.floor(step / KEYFRAME);
      const state = clone(keys[k]);
      for (let j = k * KEYFRAME; j < step; j++) apply(state, base + j);
      return state;
    },
  };
}

// The verdict's first line; a failure says where it diverged and leaves the words to the aside.
function headline(check, events) {
  const first = check.text.split("\n")[0];
  if (!check.explain) return first;
  const e = check.event === null ? null : events[check.event];
  let where = `on device ${check.rank}, outside the events shown`;
  if (e && e.k === "send") where = `message #${e.m} from device ${e.r} to device ${e.o}`;
  else if (e && e.k === "op") where = `op ${e.n} on device ${e.r}${check.where === "input" ? " (an input)" : ""}`;
  else if (e) where = `${e.n} on device ${e.r}`;
  return `check ${check.verdict} at the first divergence: ${where}`;
}

// ---- the view ----------------------------------------------------------------------------------

export function mount(el, doc, options = {}) {
  const events = doc.events;
  const base = doc.base;
  const replay = makeReplay(doc);
  const n = replay.steps;
  const check = doc.check;
  const marks = new Set(check ? check.marks : []);
  const unit = doc.time.unit;
  const present = !!options.present;
  const divergence = check && check.event !== null && check.event !== undefined ? check.event - base + 1 : null;
  let step = clamp(options.hash ? hashStep() ?? options.step ?? 0 : options.step ?? 0, 0, n);
  let state = replay.at(step);
  let timer = null;
  let speed = SPEEDS[1];

  // -- layout
  const kind = present ? "psv psv-present" : doc.devices > 16 ? "psv psv-many" : "psv";
  const root = h("div", { class: kind, tabindex: 0, "data-steps": n });
  const verdict = check ? (check.verdict || "").toLowerCase().replace(/\s+/g, "-") : null;
  const jump = h("button", {
    type: "button",
    "data-action": "jump",
    class: "psv-jump",
    title: "jump to the first divergence (D)",
    text: present ? "first divergence" : "jump to the first divergence",
    disabled: divergence === null ? true : null,
    onclick: () => goto(divergence),
  });
  const banner = check
    ? h(
        "div",
        { class: `psv-verdict psv-${verdict}`, "data-verdict": check.verdict },
        h("span", { class: "psv-verdict-text", text: headline(check, events) }),
        check.explain ? jump : null,
        !present && (check.explain || check.text.includes("\n"))
          ? h("details", {}, h("summary", { text: "the whole report" }), h("pre", { text: check.text }))
          : null,
      )
    : null;
  const head = h(
    "header",
    { class: "psv-head" },
    h("h2", { class: "psv-title", text: doc.title, title: doc.story || null }),
    doc.story && !present ? h("p", { class: "psv-story", text: doc.story }) : null,
    present ? banner : null,
  );
  const notice = doc.notice ? h("div", { class: "psv-notice", role: "note", text: doc.notice }) : null;
  // the projector mode fills the screen: with the browser's bars showing, its timeline would be cut
  const fullscreen = present
    ? h("div", {
        class: "psv-fullscreen",
        role: "note",
        hidden: true,
        text: "For the projector, go full screen (F11; on a Mac Ctrl+Cmd+F): this page is laid out for the whole screen.",
      })
    : null;
  // the browser's bars take room: the page is shorter than the screen by more than a few pixels
  const tooShort = () => !document.fullscreenElement && window.innerHeight < (window.screen.height || 720) - 40;

  const button = (action, text, title, fn) =>
    h("button", { type: "button", "data-action": action, title, text, onclick: fn });
  const play = button("play", "play", "play / pause (space)", () => toggle());
  const slider = h("input", {
    type: "range",
    min: 0,
    max: n,
    value: step,
    "aria-label": "step",
    class: "psv-slider",
    oninput: (ev) => goto(Number(ev.target.value)),
  });
  const speedSelect = h(
    "select",
    { "aria-label": "steps per second", class: "psv-speed", onchange: (ev) => (speed = Number(ev.target.value)) },
    ...SPEEDS.map((s) => h("option", { value: s, selected: s === speed ? true : null, text: `${s} steps/s` })),
  );
  const stepLabel = h("span", { class: "psv-step" });
  const timeLabel = h("span", { class: "psv-time" });
  const controls = h(
    "div",
    { class: "psv-controls", title: KEYS_HELP },
    button("start", "|<", "to the start (Home)", () => goto(0)),
    button("back", "< back", "one event back (left arrow; shift: 10)", () => goto(step - 1)),
    play,
    button("forward", "forward >", "one event forward (right arrow; shift: 10)", () => goto(step + 1)),
    button("end", ">|", "to the end (End)", () => goto(n)),
    slider,
    stepLabel,
    timeLabel,
    speedSelect,
  );
  const said = h("p", { class: "psv-said", "aria-live": "polite" });

  const grid = present ? cardGrid(doc) : null;
  const cards = h("div", { class: "psv-cards" });
  const cardNodes = [];
  const cardLists = [];
  for (let r = 0; r < doc.devices; r++) {
    const coords = grid && grid.coords ? grid.coords[r] : null;
    const title = h("h3", {}, `device ${r}`, coords ? h("span", { class: "psv-coords", text: coords }) : null);
    const list = present ? h("div", { class: "psv-card-body" }) : h("ul", { class: "psv-held" });
    cardLists.push(list);
    cardNodes.push(h("section", { class: "psv-card", "data-rank": r }, title, list));
  }
  if (grid) {
    cards.style.gridTemplateColumns = `repeat(${grid.cols}, minmax(0, 1fr))`;
    cards.style.gridTemplateRows = `repeat(${grid.rows}, minmax(0, 1fr))`;
    grid.ranks.forEach((row, i) =>
      row.forEach((r, j) => {
        cardNodes[r].style.gridArea = `${i + 1} / ${j + 1}`;
      }),
    );
  }
  cards.append(...cardNodes);
  const arrows = svg("svg", { class: "psv-arrows", "aria-hidden": "true" });
  const stage = h("div", { class: "psv-stage" }, cards, arrows);
  const explain = check && check.explain
    ? h(
        "aside",
        { class: "psv-explain", "data-event": check.event },
        h("h3", { text: "first divergence" }),
        h("p", { text: check.explain }),
      )
    : null;
  const main = h("div", { class: "psv-main" }, stage, explain);
  const flying = h("ul", { class: "psv-flying" });
  const flyingHead = h("span", { class: "psv-inflight-head", text: "in flight: " });
  const flyingBox = h("div", { class: "psv-inflight" }, flyingHead, flying);

  const timeline = makeTimeline(doc, marks, (s) => goto(s), { present });
  const parts = present
    ? [head, fullscreen, notice, controls, said, main, flyingBox, timeline.node]
    : [head, banner, notice, controls, said, main, flyingBox, timeline.node];
  root.append(...parts.filter(Boolean));
  el.append(root);

  // -- drawing
  const valueOf = (e) => doc.values[e.v];
  const saying = (e) => (typeof e.say === "string" ? e.say : e.say.join(shortText(valueOf(e))));

  function item(name, i, current) {
    const e = events[i];
    const v = valueOf(e);
    const bad = marks.has(i);
    return h(
      "li",
      {
        class: `psv-item${bad ? " psv-bad" : ""}${i === current ? " psv-new" : ""}`,
        "data-name": name,
        "data-event": i,
      },
      h("span", { class: "psv-name", text: name }),
      e.pt ? h("span", { class: "psv-part", title: "the part of the value this device holds", text: e.pt }) : null,
      e.ps ? h("span", { class: "psv-partial", text: `partial sum over ${e.ps.join(", ")}` }) : null,
      e.mb !== undefined
        ? h("span", { class: "psv-mb", style: `--mb-hue: ${hue(e.mb)}`, text: `mb ${e.mb}` })
        : null,
      h("span", { class: "psv-eq", text: " = " }),
      h("span", { class: "psv-value", title: longText(v), text: shortText(v) }),
    );
  }

  function drawCards(ranks, current) {
    const active = current >= 0 ? events[current].r : -1;
    for (const r of ranks) {
      const list = cardLists[r];
      if (present) {
        // the wrong value of an op not kept in memory (a temporary) is shown on its card as it is made
        const e = current >= 0 ? events[current] : null;
        const unheld = e && e.k === "op" && e.r === r && marks.has(current) && state.mem[r].get(e.n) !== current;
        fillCard(list, doc, state.mem[r], { marks, current, extra: unheld ? [e.n, current] : null });
        continue;
      }
      list.replaceChildren(...[...state.mem[r]].map(([name, i]) => item(name, i, current)));
      if (!state.mem[r].size) list.append(h("li", { class: "psv-empty", text: "(empty)" }));
    }
    cards.querySelectorAll(".psv-active").forEach((c) => c.classList.remove("psv-active"));
    if (active >= 0) cardNodes[active].classList.add("psv-active");
  }

  function drawFlying(current) {
    const items = [...state.fly.values()].map((i) => {
      const e = events[i];
      const what = `#${e.m} ${e.r} \u2192 ${e.o}${e.n ? " " + e.n : ""}${e.pt ? " " + e.pt : ""} = ${shortText(valueOf(e))}`;
      const partial = e.ps ? ` (partial sum over ${e.ps.join(", ")})` : "";
      const label = e.lb ? ` (${e.lb})` : "";
      return h("li", {
        class: `${marks.has(i) ? "psv-bad" : ""}${i === current ? " psv-new" : ""}`.trim() || null,
        "data-message": e.m,
        title: present ? what + partial + label : null,
        text: present ? what + partial : what + partial + label,
      });
    });
    if (present) {
      items.sort(
        (a, b) =>
          b.classList.contains("psv-bad") - a.classList.contains("psv-bad") ||
          b.classList.contains("psv-new") - a.classList.contains("psv-new"),
      );
      flyingHead.textContent = `in flight (${items.length}): `;
    }
    flying.replaceChildren(...(items.length ? items : [h("li", { class: "psv-empty", text: "none" })]));
    if (!present || !items.length) return;
    // on one line: the messages that fit, then "+N more" for the rest (every one counted, none half shown)
    const more = h("li", { class: "psv-more", "data-more": 0 });
    flying.append(more);
    let hidden = 0;
    const over = () => flying.scrollWidth > flying.clientWidth + 1;
    while (over() && hidden < items.length) {
      items[items.length - 1 - hidden].remove();
      hidden++;
      more.textContent = `+${hidden} more`;
      more.dataset.more = hidden;
    }
    if (!hidden) more.remove();
    else more.title = items.slice(items.length - hidden).map((li) => li.title).join("\n");
  }

  function drawArrows(current) {
    const box = stage.getBoundingClientRect();
    arrows.setAttribute("width", box.width);
    arrows.setAttribute("height", box.height);
    arrows.replaceChildren();
    const fly = [...state.fly.values()];
    const labelled = !present && fly.length <= MAX_LABELLED_ARROWS;
    const pairs = new Map(); // how many arrows each (src, dst) has so far: each bows a little further
    const labels = [];
    for (const i of fly) {
      const e = events[i];
      const key = `${e.r}-${e.o}`;
      const k = pairs.get(key) || 0;
      pairs.set(key, k + 1);
      const a = cardNodes[e.r];
      const b = cardNodes[e.o];
      const { from, c, to } = present ? gridRoute(a, b, box, e.o > e.r, k) : route(a, b, box, e.o > e.r, k);
      const bad = marks.has(i);
      const g = svg("g", {
        class: `psv-arrow${bad ? " psv-bad" : ""}${i === current ? " psv-new" : ""}`,
        "data-message": e.m,
      });
      g.append(svg("path", { d: `M${from.x},${from.y} Q${c.x},${c.y} ${to.x},${to.y}`, class: "psv-arrow-line" }));
      g.append(svg("path", { d: arrowHead(c, to), class: "psv-arrow-head" }));
      arrows.append(g);
      if (labelled) {
        const mid = { x: 0.25 * from.x + 0.5 * c.x + 0.25 * to.x, y: 0.25 * from.y + 0.5 * c.y + 0.25 * to.y };
        const text = `${e.n || "#" + e.m} = ${shortText(valueOf(e))}`;
        labels.push({ g, mid, text: text.length > 48 ? text.slice(0, 47) + "\u2026" : text });
      }
    }
    for (const { g, mid, text } of labels) {
      const t = svg("text", { x: mid.x, y: mid.y, class: "psv-arrow-label", "text-anchor": "middle" });
      t.textContent = text;
      g.append(t);
      const bb = t.getBBox();
      g.insertBefore(
        svg("rect", { x: bb.x - 3, y: bb.y - 1, width: bb.width + 6, height: bb.height + 2, rx: 3, class: "psv-arrow-bg" }),
        t,
      );
    }
  }

  function render(ranks) {
    const current = step > 0 ? base + step - 1 : -1;
    root.dataset.step = step;
    slider.value = step;
    const tail = doc.first || n < doc.total ? ` (event #${doc.first + Math.max(step - 1, 0)} of ${doc.total})` : "";
    stepLabel.textContent = `step ${step} / ${n}${tail}`;
    timeLabel.textContent = current >= 0 ? `t = ${fmt(events[current].t)} ${unit}` : "";
    said.textContent = current >= 0 ? saying(events[current]) : "start: nothing has happened yet";
    said.classList.toggle("psv-bad", marks.has(current));
    drawCards(ranks, current);
    drawFlying(current);
    drawArrows(current);
    if (explain) explain.classList.toggle("psv-shown", check.event !== null && current >= check.event);
    timeline.cursor(current);
  }

  // -- moving
  let lastRank = -1;
  function goto(target, notify = true) {
    target = clamp(Math.round(target), 0, n);
    if (target === step && root.dataset.step !== undefined) return;
    let ranks;
    if (target === step + 1) {
      replay.apply(state, step); // one event forward: only its device's card (and the last one's) change
      const r = events[base + step].r;
      ranks = [...new Set([r, lastRank].filter((x) => x >= 0))];
      lastRank = r;
    } else {
      state = replay.at(target);
      ranks = cardLists.map((_, r) => r);
      lastRank = target > 0 ? events[base + target - 1].r : -1;
    }
    step = target;
    render(ranks);
    if (step === n) stop();
    if (options.hash) history.replaceState(null, "", `#step=${step}`);
    if (notify && options.onStep) options.onStep(step);
  }

  function stop() {
    if (timer !== null) clearInterval(timer);
    timer = null;
    play.textContent = "play";
  }

  function toggle() {
    if (timer !== null) return stop();
    if (step === n) goto(0);
    play.textContent = "pause";
    timer = setInterval(() => goto(step + 1), 1000 / speed);
  }

  function onKey(ev) {
    const target = ev.target;
    if (target === slider || target === speedSelect) return; // they handle their own keys
    const by = ev.shiftKey ? 10 : 1;
    const moves = {
      ArrowRight: () => goto(step + by),
      ArrowLeft: () => goto(step - by),
      Home: () => goto(0),
      End: () => goto(n),
      " ": () => target.tagName !== "BUTTON" && toggle(),
      d: () => divergence !== null && goto(divergence),
      D: () => divergence !== null && goto(divergence),
    };
    if (!(ev.key in moves) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    ev.preventDefault();
    if (!options.documentKeys) ev.stopPropagation(); // in a notebook, the keys are the view's, not the notebook's
    moves[ev.key]();
  }
  const keyTarget = options.documentKeys ? document : root;
  keyTarget.addEventListener("keydown", onKey);
  const onHash = () => {
    const s = hashStep();
    if (s !== null && s !== step) goto(s);
  };
  if (options.hash) window.addEventListener("hashchange", onHash);
  // Redraw the canvas, the cards and the arrows when the size changes, in the next frame: drawing inside
  // the observer's callback could resize what it observes (a "ResizeObserver loop" error).
  let size = "";
  let frame = 0;
  const resized = new ResizeObserver((entries) => {
    const box = entries[0].contentRect;
    const now = present ? `${Math.round(box.width)}x${Math.round(box.height)}` : `${Math.round(box.width)}`;
    if (now === size) return;
    size = now;
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => {
      if (fullscreen) fullscreen.hidden = !tooShort();
      timeline.draw();
      if (present) drawCards(cardLists.map((_, r) => r), step > 0 ? base + step - 1 : -1);
      drawArrows(step > 0 ? base + step - 1 : -1);
    });
  });
  resized.observe(root);

  if (fullscreen) fullscreen.hidden = !tooShort();
  render(cardLists.map((_, r) => r));
  lastRank = step > 0 ? events[base + step - 1].r : -1;
  if (options.hash && step) history.replaceState(null, "", `#step=${step}`);
  root.dataset.ready = "true";
  return {
    goto: (s) => goto(s, false),
    get step() {
      return step;
    },
    destroy() {
      stop();
      cancelAnimationFrame(frame);
      resized.disconnect();
      keyTarget.removeEventListener("keydown", onKey);
      if (options.hash) window.removeEventListener("hashchange", onHash);
      root.remove();
    },
  };
}

// The step a link asks for: page.html#step=40.
function hashStep() {
  const m = /(?:^#|&)step=(\d+)/.exec(window.location.hash);
  return m ? Number(m[1]) : null;
}

// An arrow from card a to card b: over the tops of the cards when it goes to a higher rank, under
// their bottoms when it goes back, so arrows never cover what a card shows and the two directions
// between one pair of devices stay apart; the k-th arrow of a pair arcs a little further out.
function route(a, b, box, up, k) {
  const ra = a.getBoundingClientRect();
  const rb = b.getBoundingClientRect();
  const edge = (r, shift) => ({
    x: r.left - box.left + r.width * (0.5 + shift),
    y: up ? r.top - box.top : r.bottom - box.top,
  });
  const from = edge(ra, up ? 0.15 : -0.15);
  const to = edge(rb, up ? -0.15 : 0.15);
  const lift = Math.min(28 + 12 * k, 60);
  const y = up ? Math.min(from.y, to.y) - 2 * lift : Math.max(from.y, to.y) + 2 * lift;
  return { from, c: { x: (from.x + to.x) / 2, y }, to };
}

function arrowHead(from, to) {
  const a = Math.atan2(to.y - from.y, to.x - from.x);
  const size = 9;
  const p1 = { x: to.x - size * Math.cos(a - 0.4), y: to.y - size * Math.sin(a - 0.4) };
  const p2 = { x: to.x - size * Math.cos(a + 0.4), y: to.y - size * Math.sin(a + 0.4) };
  return `M${to.x},${to.y} L${p1.x},${p1.y} L${p2.x},${p2.y} Z`;
}

// ---- the notebook widget (anywidget) -----------------------------------------------------------

function render({ model, el }) {
  let view = null;
  const show = () => {
    if (view) view.destroy();
    view = mount(el, model.get("doc"), {
      step: model.get("step"),
      present: model.get("present"),
      onStep(s) {
        model.set("step", s);
        model.save_changes();
      },
    });
  };
  const moved = () => {
    if (view && view.step !== model.get("step")) view.goto(model.get("step"));
  };
  show();
  model.on("change:doc", show);
  model.on("change:present", show);
  model.on("change:step", moved);
  return () => {
    model.off("change:doc", show);
    model.off("change:present", show);
    model.off("change:step", moved);
    if (view) view.destroy();
  };
}

export default { render };
