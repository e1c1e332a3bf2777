// Small helpers shared by the step-through view and the schedule explorer: elements, SVG, numbers.
// A plain script part of one ES module (see assets.py): the files after it use these names.

const SVG = "http://www.w3.org/2000/svg";

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

function svg(tag, attrs = {}, text = null) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (text !== null) node.textContent = text;
  return node;
}

const clamp = (x, lo, hi) => Math.max(lo, Math.min(hi, x));

// 1, 2, 2.5 or 5 times a power of ten: round tick spacing for a time axis.
function niceStep(span) {
  const p = 10 ** Math.floor(Math.log10(span || 1));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= span);
}

function fmt(t) {
  return Number(t.toPrecision(6)).toString();
}

// The colours of the passes of a training step, the same in the view's timeline and the explorer:
// forward blue, backward orange (its input-gradient part amber), weight gradients green.
const PASS_COLOURS = { F: "#3f6fb5", B: "#d06a22", I: "#e29a2c", W: "#3a9a5b" };
const PASS_WORDS = {
  F: "forward",
  B: "backward",
  I: "backward: input gradients",
  W: "backward: weight gradients",
};
const OTHER_COLOUR = "#8d96a8";
const BAD_COLOUR = "#c62828";

// A value's text as a document stores it: a string, or [short, long(, cells)].
const shortText = (v) => (v === undefined || v === null ? "" : typeof v === "string" ? v : v[0]);
const longText = (v) => (v === undefined || v === null ? "" : typeof v === "string" ? v : v[1]);
const hue = (mb) => (mb * 67) % 360; // microbatches in distinct colours (their tags on the cards)
