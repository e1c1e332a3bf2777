// Painting rows of blocks pixel by pixel, for the schedule explorer (explorer.js), where blocks are narrower than
// a few pixels: p = 64, m = 512, v = 4 is 262,144 blocks on 1,200 pixels a row. A canvas path of that many
// rectangles takes the browser most of a second to fill; here each pixel column of a row takes the colours of what
// covers it, mixed by how much of the pixel each covers, so a redraw is one pass over the blocks and one over the
// pixels (a few milliseconds).
// A plain script part of one ES module (see assets.py), after dom.js.

const PAINT_ABOVE = 4000; // blocks on one canvas: above this many, paint pixels rather than fill rectangles

// Any CSS colour as [r, g, b] (the canvas parses it: an opaque colour reads back as "#rrggbb").
function rgbOf(ctx, colour) {
  ctx.fillStyle = colour;
  const hex = ctx.fillStyle;
  return [1, 3, 5].map((k) => parseInt(hex.slice(k, k + 2), 16));
}

// Paint `rows` rows onto `canvas` (nothing drawn on it yet: the pixels are replaced). spans(r, add) calls
// add(c, x0, x1) for what covers row r from x0 to x1 (CSS pixels) in colours[c]; add(c, x0, x1, under) also takes
// that much from colours[under] (a block over the idle background). Row r fills top(r) to top(r) + height.
function paintRows(canvas, ctx, colours, rows, spans, top, height) {
  const ratio = canvas.width / parseFloat(canvas.style.width);
  const width = canvas.width;
  const n = colours.length;
  const rgb = colours.map((c) => rgbOf(ctx, c));
  const image = ctx.createImageData(width, canvas.height);
  const pixels = new Uint32Array(image.data.buffer); // RGBA bytes, read as little-endian words: ABGR
  const cover = new Float32Array(width * n); // how much of pixel i colour c covers: cover[i * n + c]
  const line = new Uint32Array(width);
  const add = (c, x0, x1, under = -1) => {
    const end = clamp(x1 * ratio, 0, width);
    for (let a = clamp(x0 * ratio, 0, width); a < end; ) {
      const i = Math.floor(a);
      const part = Math.min(end, i + 1) - a;
      cover[i * n + c] += part;
      if (under >= 0) cover[i * n + under] -= part;
      a = i + 1;
    }
  };
  for (let r = 0; r < rows; r++) {
    cover.fill(0);
    spans(r, add);
    for (let i = 0; i < width; i++) {
      let sum = 0;
      let red = 0;
      let green = 0;
      let blue = 0;
      for (let c = 0; c < n; c++) {
        const w = cover[i * n + c];
        if (w <= 0) continue;
        sum += w;
        red += w * rgb[c][0];
        green += w * rgb[c][1];
        blue += w * rgb[c][2];
      }
      line[i] =
        sum < 1e-3
          ? 0
          : ((Math.round(255 * Math.min(1, sum)) << 24) | (Math.round(blue / sum) << 16) | (Math.round(green / sum) << 8) | Math.round(red / sum)) >>> 0;
    }
    const y1 = Math.min(canvas.height, Math.round((top(r) + height) * ratio));
    for (let y = Math.max(0, Math.round(top(r) * ratio)); y < y1; y++) pixels.set(line, y * width);
  }
  ctx.putImageData(image, 0, 0);
}
