// The step-through view of a run: one card per device (what it holds), the messages in flight as
// arrows from sender to receiver, the timeline with a cursor, the current event in words, and the
// check's first divergence in red. It draws a view document (simulator/views/web/document.py) and is the
// one module both front ends use: the notebook widget (anywidget calls the default export's render)
// and the self-contained page (which inlines this file and calls mount).
//
// Memory is replayed, not stored per step: each event says what it does (mem: +1 puts its value in
// device r's memory under its name, -1 drops it; fly: +1 a message leaves, -1 it is received). A
// snapshot every KEYFRAME events makes any jump replay at most that many.
//
// One file on purpose, though longer than the project's usual module: anywidget loads a single ES
// module (relative imports have nowhere to resolve from in a notebook), and the page inlines it as is.
// Its sections: replay, DOM helpers, the view (cards, arrows, controls), the timeline, the widget glue.

const KEYFRAME = 256;
const MAX_LABELLED_ARROWS = 12; // more arrows than this are drawn without their value labels
const SPEEDS = [1, 4, 16, 64]; // steps per second when playing
const SVG = "http://www.w3.org/2000/svg";

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

// ---- small DOM helpers -------------------------------------------------------------------------

function h(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) if (c !== null && c !== undefined) node.append(c);
  return node;
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return node;
}

const shortText = (v) => (v === undefined || v === null ? "" : typeof v === "string" ? v : v[0]);
const longText = (v) => (v === undefined || v === null ? "" : typeof v === "string" ? v : v[1]);
const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, x));
const hue = (mb) => (mb * 67) % 360; // microbatches in distinct colours

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
  let step = clamp(options.step ?? 0, 0, n);
  let state = replay.at(step);
  let timer = null;
  let speed = SPEEDS[1];

  // -- layout
  const root = h("div", { class: doc.devices > 16 ? "psv psv-many" : "psv", tabindex: 0, "data-steps": n });
  const verdict = check ? (check.verdict || "").toLowerCase().replace(/\s+/g, "-") : null;
  const jump = h("button", {
    type: "button",
    "data-action": "jump",
    class: "psv-jump",
    text: "jump to the first divergence",
    disabled: check && check.event === null ? true : null,
    onclick: () => goto(check.event - base + 1),
  });
  const head = h(
    "header",
    { class: "psv-head" },
    h("h2", { class: "psv-title", text: doc.title }),
    doc.story ? h("p", { class: "psv-story", text: doc.story }) : null,
  );
  const banner = check
    ? h(
        "div",
        { class: `psv-verdict psv-${verdict}`, "data-verdict": check.verdict },
        h("span", { class: "psv-verdict-text", text: headline(check, events) }),
        check.explain ? jump : null,
        check.explain || check.text.includes("\n")
          ? h("details", {}, h("summary", { text: "the whole report" }), h("pre", { text: check.text }))
          : null,
      )
    : null;
  const notice = doc.notice ? h("div", { class: "psv-notice", role: "note", text: doc.notice }) : null;

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
    { class: "psv-controls" },
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

  const cards = h("div", { class: "psv-cards" });
  const cardLists = [];
  for (let r = 0; r < doc.devices; r++) {
    const list = h("ul", { class: "psv-held" });
    cardLists.push(list);
    cards.append(h("section", { class: "psv-card", "data-rank": r }, h("h3", { text: `device ${r}` }), list));
  }
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
  const flyingBox = h("div", { class: "psv-inflight" }, h("span", { text: "in flight: " }), flying);

  const timeline = makeTimeline(doc, marks, (s) => goto(s));
  root.append(...[head, banner, notice, controls, said, main, flyingBox, timeline.node].filter(Boolean));
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
      list.replaceChildren(...[...state.mem[r]].map(([name, i]) => item(name, i, current)));
      if (!state.mem[r].size) list.append(h("li", { class: "psv-empty", text: "(empty)" }));
    }
    cards.querySelectorAll(".psv-active").forEach((c) => c.classList.remove("psv-active"));
    if (active >= 0) cards.children[active].classList.add("psv-active");
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
        text: what + partial + label,
      });
    });
    flying.replaceChildren(...(items.length ? items : [h("li", { class: "psv-empty", text: "none" })]));
  }

  function drawArrows(current) {
    const box = stage.getBoundingClientRect();
    arrows.setAttribute("width", box.width);
    arrows.setAttribute("height", box.height);
    arrows.replaceChildren();
    const fly = [...state.fly.values()];
    const labelled = fly.length <= MAX_LABELLED_ARROWS;
    const pairs = new Map(); // how many arrows each (src, dst) has so far: each bows a little further
    const labels = [];
    for (const i of fly) {
      const e = events[i];
      const key = `${e.r}-${e.o}`;
      const k = pairs.get(key) || 0;
      pairs.set(key, k + 1);
      const { from, c, to } = route(cards.children[e.r], cards.children[e.o], box, e.o > e.r, k);
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
    };
    if (!(ev.key in moves) || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    ev.preventDefault();
    if (!options.documentKeys) ev.stopPropagation(); // in a notebook, the keys are the view's, not the notebook's
    moves[ev.key]();
  }
  const keyTarget = options.documentKeys ? document : root;
  keyTarget.addEventListener("keydown", onKey);
  // Redraw the canvas and the arrows when the width changes, in the next frame: drawing inside the
  // observer's callback could resize what it observes (a "ResizeObserver loop" error).
  let width = 0;
  let frame = 0;
  const resized = new ResizeObserver((entries) => {
    const w = Math.round(entries[0].contentRect.width);
    if (w === width) return;
    width = w;
    cancelAnimationFrame(frame);
    frame = requestAnimationFrame(() => {
      timeline.draw();
      drawArrows(step > 0 ? base + step - 1 : -1);
    });
  });
  resized.observe(root);

  render(cardLists.map((_, r) => r));
  lastRank = step > 0 ? events[base + step - 1].r : -1;
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
      root.remove();
    },
  };
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

// 1, 2, 2.5 or 5 times a power of ten: round tick spacing for the time axis.
function niceStep(span) {
  const p = 10 ** Math.floor(Math.log10(span || 1));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= span);
}

function fmt(t) {
  return Number(t.toPrecision(6)).toString();
}

// ---- the timeline ------------------------------------------------------------------------------
// One row per device: ops as bars (coloured by microbatch), messages as lines from the sender at its
// send time to the receiver at its arrival. Drawn once on a canvas (fast for tens of thousands of
// events); a second canvas on top holds the cursor and the current event, redrawn at every step.

function makeTimeline(doc, marks, onPick) {
  const events = doc.events;
  const base = doc.base;
  const devices = doc.devices;
  const rowH = devices <= 8 ? 22 : Math.max(4, Math.floor(360 / devices));
  const left = 64;
  const top = 4;
  const axis = 18;
  const height = top + devices * rowH + axis;
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const e of events) {
    t0 = Math.min(t0, e.t);
    t1 = Math.max(t1, e.t1 ?? e.t);
  }
  if (!(t1 > t0)) t1 = t0 + 1;
  const backCanvas = h("canvas", { class: "psv-timeline-back" });
  const frontCanvas = h("canvas", { class: "psv-timeline-front" });
  const box = h("div", { class: "psv-timeline-box", style: `height: ${height}px` }, backCanvas, frontCanvas);
  const node = h(
    "div",
    { class: "psv-timeline", "data-cursor": -1 },
    h("div", { class: "psv-timeline-title", text: `timeline (${doc.time.unit}); click to jump` }),
    box,
  );
  let width = 0;
  let current = -1;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * (width - left - 8);
  const y = (r) => top + r * rowH + rowH / 2;

  function size(canvas) {
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.round(width * ratio));
    canvas.height = Math.round(height * ratio);
    canvas.style.width = `${width}px`;
    canvas.style.height = `${height}px`;
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    return ctx;
  }

  function draw() {
    width = box.clientWidth || 800;
    const ctx = size(backCanvas);
    ctx.font = "11px sans-serif";
    ctx.textBaseline = "middle";
    const every = Math.ceil(devices / Math.floor((devices * rowH) / 14));
    for (let r = 0; r < devices; r++) {
      if (r % 2) {
        ctx.fillStyle = "rgba(128,128,128,0.08)";
        ctx.fillRect(left, top + r * rowH, width - left, rowH);
      }
      if (r % every === 0) {
        ctx.fillStyle = "#555";
        ctx.fillText(`device ${r}`, 4, y(r));
      }
    }
    ctx.lineWidth = 1;
    for (let i = 0; i < events.length; i++) {
      const e = events[i];
      if (e.k === "op") {
        const w = Math.max(1, x(e.t1) - x(e.t));
        ctx.fillStyle = marks.has(i) ? "#c62828" : e.mb !== undefined ? `hsl(${hue(e.mb)} 60% 55%)` : "#4a78b5";
        ctx.fillRect(x(e.t), top + e.r * rowH + 2, w, rowH - 4);
        if (rowH >= 16 && w > 30 && e.n) {
          ctx.fillStyle = "#fff";
          ctx.save();
          ctx.beginPath();
          ctx.rect(x(e.t), top + e.r * rowH, w, rowH);
          ctx.clip();
          ctx.fillText(e.n, x(e.t) + 3, y(e.r));
          ctx.restore();
        }
      } else if (e.k === "send") {
        ctx.strokeStyle = marks.has(i) ? "#c62828" : "rgba(90,90,90,0.55)";
        ctx.lineWidth = marks.has(i) ? 2.5 : 1;
        ctx.beginPath();
        ctx.moveTo(x(e.t), y(e.r));
        ctx.lineTo(x(e.t1 ?? e.t), y(e.o));
        ctx.stroke();
        ctx.lineWidth = 1;
      }
    }
    ctx.fillStyle = "#555";
    ctx.textBaseline = "alphabetic";
    const axisY = top + devices * rowH + 13;
    const tick = niceStep((t1 - t0) / 6);
    ctx.textAlign = "center";
    for (let t = Math.ceil(t0 / tick) * tick; t <= t1 + tick * 1e-9; t += tick) {
      ctx.fillRect(x(t), top + devices * rowH, 1, 3);
      ctx.fillText(fmt(Number(t.toPrecision(12))), clamp(x(t), left, width - 20), axisY);
    }
    drawCursor();
  }

  function drawCursor() {
    const ctx = size(frontCanvas);
    node.dataset.cursor = current;
    if (current < 0) return;
    const e = events[current];
    ctx.strokeStyle = marks.has(current) ? "#c62828" : "#111";
    ctx.lineWidth = 2;
    if (e.k === "op") ctx.strokeRect(x(e.t) - 1, top + e.r * rowH + 1, Math.max(2, x(e.t1) - x(e.t)) + 2, rowH - 2);
    if (e.k === "send") {
      ctx.beginPath();
      ctx.moveTo(x(e.t), y(e.r));
      ctx.lineTo(x(e.t1 ?? e.t), y(e.o));
      ctx.stroke();
    }
    ctx.strokeStyle = "#e08a00";
    ctx.beginPath();
    ctx.moveTo(x(e.t), top);
    ctx.lineTo(x(e.t), top + devices * rowH);
    ctx.stroke();
  }

  frontCanvas.addEventListener("click", (ev) => {
    const rect = frontCanvas.getBoundingClientRect();
    const t = t0 + ((ev.clientX - rect.left - left) / (width - left - 8)) * (t1 - t0);
    let pick = 0; // the step after the last event at or before the clicked time
    for (let i = base; i < events.length; i++) if (events[i].t <= t) pick = i - base + 1;
    onPick(pick);
  });

  return {
    node,
    draw,
    cursor(i) {
      current = i;
      if (width) drawCursor();
    },
  };
}

// ---- the notebook widget (anywidget) -----------------------------------------------------------

function render({ model, el }) {
  let view = null;
  const show = () => {
    if (view) view.destroy();
    view = mount(el, model.get("doc"), {
      step: model.get("step"),
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
  model.on("change:step", moved);
  return () => {
    model.off("change:doc", show);
    model.off("change:step", moved);
    if (view) view.destroy();
  };
}

export default { render };
