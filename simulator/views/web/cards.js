// The projector mode's cards: laid out on the mesh's grid, each showing what changed last in full (the
// numbers of an array of up to 64 as a matrix, the wrong ones red) and the rest of what it holds as
// names, so that eight devices, the messages in flight and the timeline fit one 1280 x 720 screen.
// Arrows between the cards keep to the gaps between them.

// The grid the cards go on: the document's (from the mesh), else one row of up to four, else two rows.
function cardGrid(doc) {
  if (doc.grid) return doc.grid;
  const n = doc.devices;
  const rows = n <= 4 ? 1 : n <= 8 ? 2 : Math.ceil(Math.sqrt(n / 2));
  const cols = Math.ceil(n / rows);
  const ranks = [];
  for (let r = 0; r < rows; r++) ranks.push([...Array(cols).keys()].map((c) => r * cols + c).filter((x) => x < n));
  return { rows, cols, ranks, coords: null };
}

const MIN_FONT = 12; // px: the smallest number a projector shows legibly at 1280 x 720
const BAD_FONT = 14; // px: the first divergence's numbers, larger still
const ELLIPSIS = "\u2026";

// Rows (or columns) 0..n-1 to show when only `room` fit: all, or the leading and trailing ones with null (an
// ellipsis) between them, so that a matrix too large for its card is shortened in the middle, never cut. `must`
// (the first wrong number's row or column) is kept wherever it falls, with an ellipsis on each side where needed.
function keep(n, room, must = null) {
  if (n <= room) return [...Array(n).keys()];
  if (must === null || must < 0 || must >= n) {
    if (room < 3) return room === 2 ? [0, null] : [null]; // no room for both ends: the first, or only the ellipsis
    const head = Math.ceil((room - 1) / 2);
    const tail = room - 1 - head;
    return [...Array(head).keys(), null, ...Array.from({ length: tail }, (_, k) => n - tail + k)];
  }
  const shown = (kept) => {
    const out = kept[0] > 0 ? [null] : [];
    kept.forEach((k, t) => out.push(...(t && k > kept[t - 1] + 1 ? [null, k] : [k])));
    return kept[kept.length - 1] < n - 1 ? [...out, null] : out;
  };
  if (shown([must]).length > room) return room === 1 ? [must] : must < n / 2 ? [must, null] : [null, must];
  let kept = [must];
  for (let k = 0; k < n; k++) {
    const next = [...new Set([...kept, k % 2 ? n - 1 - (k >> 1) : k >> 1])].sort((a, b) => a - b); // 0, n-1, 1, ...
    if (shown(next).length <= room) kept = next;
  }
  return shown(kept);
}

// Where flat index k is in a value of `cells` (its rows): "row r, column c", or "element k" of a vector.
const cellName = (cells, k) => (cells.length === 1 ? `element ${k}` : `row ${Math.floor(k / cells[0].length)}, column ${k % cells[0].length}`);

// A value's numbers as a table, sized to the room it has, at `least` px or more; the cells in `bad` (flat
// indices) in red. A vector too long for one line goes on over several (its numbers still in order, left to
// right); what still does not fit is shortened in the middle with an ellipsis row or column, keeping the row and
// column of flat index `focus` (the first wrong number, or the one due there) in view.
function matrixTable(cells, bad, room, least = MIN_FONT, focus = null) {
  let grid = cells.map((row, i) => row.map((text, j) => [text, i * row.length + j]));
  const longest = Math.max(...cells.flat().map((c) => c.length));
  const perCell = 0.61 * longest + 1.0; // a digit is 0.6em, a cell's padding 0.9em
  const fits = (n) => room.width / n / perCell;
  if (grid.length === 1 && fits(grid[0].length) < least) {
    const per = Math.max(1, Math.floor(room.width / (least * perCell)));
    const flat = grid[0];
    grid = Array.from({ length: Math.ceil(flat.length / per) }, (_, k) => flat.slice(k * per, (k + 1) * per));
  }
  const cols = Math.max(...grid.map((row) => row.length));
  const byHeight = (room.height - 4) / (1.3 * grid.length);
  const size = clamp(Math.floor(Math.min(fits(cols), byHeight, 16)), least, 16);
  const at = focus === null ? -1 : grid.findIndex((row) => row.some((cell) => cell[1] === focus));
  const across = at < 0 ? null : grid[at].findIndex((cell) => cell[1] === focus);
  const rowsShown = keep(grid.length, Math.max(1, Math.floor((room.height - 4) / (1.3 * size))), at < 0 ? null : at);
  const colsShown = keep(cols, Math.max(1, Math.floor(room.width / (size * perCell))), across);
  if (!rowsShown.some((i) => i !== null)) return null; // not one row fits: the value's shape says enough
  const table = h("table", { class: "psv-matrix", style: `font-size: ${size}px` });
  if (rowsShown.length < grid.length || colsShown.length < cols) table.dataset.shortened = `${grid.length}x${cols}`;
  for (const i of rowsShown) {
    const tr = h("tr");
    for (const j of colsShown) {
      const cell = i === null || j === null ? null : grid[i][j];
      if (cell === undefined) continue; // a wrapped vector's last line is short
      if (cell === null) {
        tr.append(h("td", { class: "psv-cell-more", text: i === null && j === null ? ELLIPSIS : i === null ? "\u22ee" : ELLIPSIS }));
        continue;
      }
      const wrong = bad && bad.has(cell[1]);
      const title = wrong || cell[1] === focus ? cellName(cells, cell[1]) : null;
      tr.append(h("td", { class: wrong ? "psv-cell-bad" : null, "data-k": cell[1], title, text: cell[0] }));
    }
    table.append(tr);
  }
  return table;
}

// One value in full on a projector card: its name and tags; its numbers come once it is placed (`numbers`).
function fullItem(doc, name, i, { bad, isNew }) {
  const e = doc.events[i];
  const v = doc.values[e.v];
  const head = h(
    "div",
    { class: "psv-item-head" },
    h("span", { class: "psv-name", text: name }),
    e.pt ? h("span", { class: "psv-part", title: "the part of the value this device holds", text: e.pt }) : null,
    e.ps ? h("span", { class: "psv-partial", text: `partial over ${e.ps.join(", ")}` }) : null,
    e.mb !== undefined ? h("span", { class: "psv-mb", style: `--mb-hue: ${hue(e.mb)}`, text: `mb ${e.mb}` }) : null,
    h("span", { class: "psv-eq", text: " = " }),
    h("span", { class: "psv-value", title: longText(v), text: shortText(v) }),
  );
  return h(
    "li",
    { class: `psv-item psv-full${bad ? " psv-bad" : ""}${isNew ? " psv-new" : ""}`, "data-name": name, "data-event": i },
    head,
  );
}

// An item's numbers in the room left under its head: its matrix (the wrong cells red, at BAD_FONT or more), and
// for the first divergence the value due under it, the two sharing the room.
function numbers(doc, li, i, bad, room) {
  const v = doc.values[doc.events[i].v];
  const cells = Array.isArray(v) && v.length > 2 ? v[2] : null;
  const check = doc.check;
  const due = bad && check && check.expected !== null && check.expected !== undefined ? doc.values[check.expected] : undefined;
  const dueCells = Array.isArray(due) && due.length > 2 ? due[2] : null;
  const least = bad ? BAD_FONT : MIN_FONT;
  const share = dueCells && cells ? (room.height - 22) / 2 : room.height - (due !== undefined ? 24 : 0);
  const wrong = bad && check && check.cells ? new Set(check.cells) : null;
  const focus = wrong && wrong.size ? Math.min(...wrong) : null; // the first wrong number: never in an ellipsis
  const table = cells ? matrixTable(cells, wrong, { width: room.width, height: share }, least, focus) : null;
  if (table) li.append(table);
  if (due === undefined) return;
  const should = h("div", { class: "psv-expected" }, h("span", { text: "should be " }));
  const dueTable = dueCells ? matrixTable(dueCells, null, { width: room.width, height: share }, least, focus) : null;
  should.append(dueTable || h("span", { class: "psv-value", text: shortText(due) }));
  li.append(should);
}

// Fill one card's body: the newest values (and the wrong one, first) in full while they fit, then the
// names of the rest on one line. `held` is the card's [name, event] pairs; `extra` one more to show (the
// first divergence when it is a temporary, which no memory holds).
function fillCard(body, doc, held, { marks, current, extra = null }) {
  const entries = [...held, ...(extra ? [extra] : [])].sort((a, b) => marks.has(b[1]) - marks.has(a[1]) || b[1] - a[1]);
  const full = h("ul", { class: "psv-held psv-full-list" });
  const older = h("div", { class: "psv-older", text: "+" }); // holds a line while the values are measured
  body.replaceChildren(full, older);
  if (!entries.length) {
    full.append(h("li", { class: "psv-empty", text: "(empty)" }));
    return;
  }
  const width = body.clientWidth - 8;
  const bottom = () => body.getBoundingClientRect().top + body.clientHeight - older.offsetHeight - 2;
  const rest = [];
  let tries = 0; // after the first that does not fit, a few more (a short value may fit where a matrix did not)
  for (const [name, i] of entries) {
    if (rest.length && ++tries > 6) {
      rest.push([name, i]);
      continue;
    }
    const bad = marks.has(i);
    const li = fullItem(doc, name, i, { bad, isNew: i === current });
    full.append(li);
    numbers(doc, li, i, bad, { width, height: bottom() - li.getBoundingClientRect().bottom });
    if (full.children.length > 1 && li.getBoundingClientRect().bottom > bottom() + 1) {
      li.remove();
      rest.push([name, i]);
    }
  }
  older.replaceChildren();
  if (rest.length) {
    older.append(h("span", { class: "psv-older-count", text: `+${rest.length}: ` }));
    for (const [name, i] of rest)
      older.append(h("span", { class: `psv-chip${marks.has(i) ? " psv-bad" : ""}`, "data-name": name, text: name }));
    older.title = rest.map(([name]) => name).join(", ");
  }
}

// An arrow between two cards of the grid that keeps to the gaps: side by side, a short arrow across the
// gap between them (forward above the middle, backward below); further along a row, an arc over the
// row (forward) or under it (backward); between rows, across the gap between the rows.
function gridRoute(a, b, box, forward, k) {
  const ra = rel(a.getBoundingClientRect(), box);
  const rb = rel(b.getBoundingClientRect(), box);
  const sameRow = Math.abs(ra.top - rb.top) < 2;
  const shift = 7 * k;
  if (sameRow && Math.abs(ra.cx - rb.cx) < 1.6 * ra.width) {
    const y = ra.top + ra.height * (forward ? 0.3 : 0.7) + (forward ? shift : -shift);
    const from = { x: ra.cx < rb.cx ? ra.right : ra.left, y };
    const to = { x: ra.cx < rb.cx ? rb.left : rb.right, y };
    return { from, c: { x: (from.x + to.x) / 2, y }, to };
  }
  if (sameRow) {
    const yA = forward ? ra.top : ra.bottom;
    const from = { x: ra.cx + (forward ? 0.2 : -0.2) * ra.width, y: yA };
    const to = { x: rb.cx + (forward ? -0.2 : 0.2) * rb.width, y: yA };
    const lift = Math.min(14 + 4 * k, 20);
    return { from, c: { x: (from.x + to.x) / 2, y: forward ? yA - 2 * lift : yA + 2 * lift }, to };
  }
  const down = ra.top < rb.top;
  const from = { x: ra.cx + (forward ? -0.12 : 0.12) * ra.width + shift, y: down ? ra.bottom : ra.top };
  const to = { x: rb.cx + (forward ? -0.12 : 0.12) * rb.width + shift, y: down ? rb.top : rb.bottom };
  return { from, c: { x: (from.x + to.x) / 2, y: (from.y + to.y) / 2 }, to };
}

function rel(r, box) {
  const left = r.left - box.left;
  const top = r.top - box.top;
  return { left, top, right: left + r.width, bottom: top + r.height, width: r.width, height: r.height, cx: left + r.width / 2 };
}
