// The example page: convolutions of a bundled picture on the browser's WebGPU through
// wgconv's wasm package (examples/web/pkg, built by `bash scripts/web.sh`).
//
// window.wgconvPage tells a test or screenshot driver how the page did: done, ok, errors
// (console errors and uncaught exceptions), outputs (per image: whether it has contrast),
// timings.

import { mulberry32 } from "./random.js";

const page = { done: false, ok: false, errors: [], outputs: {}, timings: [], kernels: {} };
window.wgconvPage = page;

// Console errors and uncaught failures count against the page (the browser test checks
// that there are none).
const consoleError = console.error.bind(console);
console.error = (...args) => { page.errors.push(args.map(String).join(" ")); consoleError(...args); };
window.addEventListener("error", (e) => page.errors.push(`uncaught: ${e.message}`));
window.addEventListener("unhandledrejection", (e) => page.errors.push(`unhandled rejection: ${e.reason}`));

const $ = (id) => document.getElementById(id);
const setStatus = (s) => { $("status").textContent = s; };

function finish(ok) {
  page.ok = ok && page.errors.length === 0;
  page.done = true;
}

function noWebGpu(why) {
  const box = $("nowebgpu");
  box.style.display = "block";
  box.innerHTML =
    "<b>This browser cannot run WebGPU compute shaders, so this page cannot run wgconv.</b><br>" +
    `${why}<br>WebGPU ships in Chrome and Edge 113+ (Windows, macOS, ChromeOS, Android; on Linux behind ` +
    "<code>--enable-unsafe-webgpu</code>), Safari 26+ and Firefox 141+ (Windows). The page must be served over " +
    "https or from localhost.";
  $("adapter").textContent = "No WebGPU adapter.";
  setStatus("Nothing was computed.");
  page.noWebGpu = why;
  finish(false);
}

function randomArray(n, rand, scale) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1) * scale;
  return a;
}

async function loadPicture(url) {
  const img = new Image();
  img.src = url;
  await img.decode();
  const c = document.createElement("canvas");
  c.width = img.width; c.height = img.height;
  const ctx = c.getContext("2d");
  ctx.drawImage(img, 0, 0);
  const { data } = ctx.getImageData(0, 0, c.width, c.height);
  const hw = c.width * c.height;
  const x = new Float32Array(3 * hw);
  for (let i = 0; i < hw; i++) for (let ch = 0; ch < 3; ch++) x[ch * hw + i] = data[4 * i + ch] / 255;
  return { x, w: c.width, h: c.height };
}

// Draws planes of an NCHW image (one image) into a canvas: rgb = three plane indices or
// one (gray); each plane scaled to its own range (or fixed to [0, 1]). Returns whether the
// picture has contrast (not one flat colour).
function draw(canvas, y, c, h, w, planes, fixed) {
  canvas.width = w; canvas.height = h;
  const ctx = canvas.getContext("2d");
  const im = ctx.createImageData(w, h);
  const hw = h * w;
  const scaled = planes.map((p) => {
    const v = y.subarray(p * hw, (p + 1) * hw);
    let lo = 0, hi = 1;
    if (!fixed) { lo = Infinity; hi = -Infinity; for (const e of v) { if (e < lo) lo = e; if (e > hi) hi = e; } }
    const span = hi - lo || 1;
    return { v, lo, span };
  });
  let min = 255, max = 0;
  for (let i = 0; i < hw; i++) {
    for (let k = 0; k < 3; k++) {
      const s = scaled[planes.length === 1 ? 0 : k];
      const val = Math.max(0, Math.min(255, Math.round(((s.v[i] - s.lo) / s.span) * 255)));
      im.data[4 * i + k] = val;
      if (val < min) min = val;
      if (val > max) max = val;
    }
    im.data[4 * i + 3] = 255;
  }
  ctx.putImageData(im, 0, 0);
  return max - min > 16;
}

// The mean of each third of the channels as red, green and blue: a picture of a 64-channel
// feature map.
function thirds(y, c, hw) {
  const out = new Float32Array(3 * hw);
  for (let ch = 0; ch < c; ch++) {
    const k = Math.min(2, Math.floor((ch * 3) / c));
    for (let i = 0; i < hw; i++) out[k * hw + i] += y[ch * hw + i];
  }
  return out;
}

function card(title) {
  const d = document.createElement("div");
  d.className = "card";
  d.innerHTML = `<h3>${title}</h3><canvas></canvas><div class="k"></div><div class="why"></div><div class="t"></div>`;
  $("results").appendChild(d);
  return d;
}

// Runs a convolution twice (the first run compiles its pipeline), shows the kernel, why
// it was chosen, and both times; returns the output.
async function run(device, title, spec, weight, bias, x, shape) {
  const conv = new wasm.Conv(device, spec, weight, bias);
  let t = performance.now();
  let y = await conv.forward(x, shape);
  const first = performance.now() - t;
  t = performance.now();
  y = await conv.forward(x, shape);
  const second = performance.now() - t;
  const out = conv.outputShape(shape);
  const row = { title, input: shape.join("×"), kernel: conv.kernel, source: conv.source, reason: conv.reason, first, second };
  page.timings.push(row);
  page.kernels[title] = conv.kernel;
  const tr = document.createElement("tr");
  tr.innerHTML = `<td>${title}</td><td>${row.input}</td><td><code>${row.kernel}</code></td>` +
    `<td class="num">${first.toFixed(1)}</td><td class="num">${second.toFixed(1)}</td>`;
  $("timings").querySelector("tbody").appendChild(tr);
  conv.free();
  return { y, out, row };
}

function show(el, row) {
  el.querySelector(".k").textContent = `${row.kernel} (${row.source})`;
  el.querySelector(".why").textContent = row.reason;
  el.querySelector(".t").textContent = `${row.second.toFixed(1)} ms (first run ${row.first.toFixed(1)} ms)`;
}

// Horizontal bars of milliseconds per run, the selected config highlighted.
function barChart(rows, selected) {
  const max = Math.max(...rows.map((r) => r.ms));
  const bar = 18, label = 230, width = 640;
  const svg = [`<svg xmlns="http://www.w3.org/2000/svg" width="${label + width + 80}" height="${rows.length * (bar + 4) + 4}" font-size="12" font-family="ui-monospace, monospace">`];
  rows.forEach((r, i) => {
    const y = 2 + i * (bar + 4);
    const w = Math.max(1, (r.ms / max) * width);
    const fill = r.kernel === selected ? "#d9822b" : "#4a78b5";
    svg.push(`<text x="${label - 6}" y="${y + 13}" text-anchor="end">${r.kernel.replace("tiled:", "")}</text>`);
    svg.push(`<rect x="${label}" y="${y}" width="${w.toFixed(1)}" height="${bar}" fill="${fill}"/>`);
    svg.push(`<text x="${label + w + 4}" y="${y + 13}">${r.ms.toFixed(2)} ms</text>`);
  });
  svg.push("</svg>");
  return svg.join("");
}

let wasm;

async function main() {
  const params = new URLSearchParams(location.search);
  // ?without-webgpu: what a browser without WebGPU shows (the browser tests check it).
  if (!("gpu" in navigator) || params.has("without-webgpu")) return noWebGpu("<code>navigator.gpu</code> is missing.");
  wasm = await import("./pkg/wgconv_web.js");
  await wasm.default();
  let device;
  try {
    device = await wasm.Device.open(params.get("limits") || "adapter");
  } catch (e) {
    return noWebGpu(`Opening an adapter failed: ${e.message ?? e}`);
  }
  const info = JSON.parse(device.info());
  // The browser may describe the adapter to the page (vendor, architecture) even where
  // wgpu's adapter name is empty.
  let gpuInfo = "";
  try {
    const a = await navigator.gpu.requestAdapter();
    const i = a && (a.info ?? (a.requestAdapterInfo && (await a.requestAdapterInfo())));
    if (i) gpuInfo = [i.vendor, i.architecture, i.device, i.description].filter(Boolean).join(", ");
  } catch { /* informational only */ }
  page.adapter = { ...info, gpuInfo };
  const feats = Object.entries(info.features).filter(([, v]) => v).map(([k]) => k).join(", ") || "none";
  const L = info.limits;
  $("adapter").innerHTML =
    `<b>${info.name}</b>${gpuInfo ? ` (${gpuInfo})` : ""}, ${info.deviceType}, wgpu backend ${info.backend}, ` +
    `wgconv ${wasm.version()}.<br>Features used where present: ${feats}. Limits (${info.limitsAsked}): ` +
    `${L.maxComputeWorkgroupStorageSize} B workgroup memory, ${L.maxComputeInvocationsPerWorkgroup} invocations, ` +
    `${L.maxStorageBuffersPerShaderStage} storage buffers per stage, ${(L.maxStorageBufferBindingSize / 2 ** 20).toFixed(0)} MiB per binding.`;

  setStatus("Running the convolutions…");
  const pic = await loadPicture("picture.png");
  const { w, h } = pic;
  const shape = [1, 3, h, w];
  const input = card("Input picture");
  page.outputs.input = draw(input.querySelector("canvas"), pic.x, 3, h, w, [0, 1, 2], true);
  input.querySelector(".k").textContent = `picture.png, ${w}×${h}`;

  // Edge detection: Sobel x and y of the luminance, one convolution with two outputs.
  const lum = [0.299, 0.587, 0.114];
  const sx = [-1, 0, 1, -2, 0, 2, -1, 0, 1], sy = [-1, -2, -1, 0, 0, 0, 1, 2, 1];
  const we = new Float32Array(2 * 3 * 9);
  for (let c = 0; c < 3; c++) for (let k = 0; k < 9; k++) { we[c * 9 + k] = lum[c] * sx[k]; we[27 + c * 9 + k] = lum[c] * sy[k]; }
  const edge = await run(device, "Edge detection (Sobel)", { inChannels: 3, outChannels: 2, kernel: 3, padding: 1 }, we, undefined, pic.x, shape);
  const hw = h * w;
  const mag = new Float32Array(hw);
  for (let i = 0; i < hw; i++) mag[i] = Math.hypot(edge.y[i], edge.y[hw + i]);
  const ce = card("Edge detection (Sobel)");
  page.outputs.edges = draw(ce.querySelector("canvas"), mag, 1, h, w, [0], false);
  show(ce, edge.row);

  // Blur: a 5×5 Gaussian on each colour channel (a depthwise convolution, groups = 3).
  const g1 = [1, 4, 6, 4, 1];
  const wb = new Float32Array(3 * 25);
  for (let c = 0; c < 3; c++) for (let i = 0; i < 5; i++) for (let j = 0; j < 5; j++) wb[c * 25 + i * 5 + j] = (g1[i] * g1[j]) / 256;
  const blur = await run(device, "Blur (5×5 Gaussian)", { inChannels: 3, outChannels: 3, kernel: 5, padding: 2, groups: 3 }, wb, undefined, pic.x, shape);
  const cb = card("Blur (5×5 Gaussian)");
  page.outputs.blur = draw(cb.querySelector("canvas"), blur.y, 3, h, w, [0, 1, 2], true);
  show(cb, blur.row);

  // A random 3×3 layer to 64 channels (bias + ReLU), then a random 64→64 3×3 layer, then a
  // depthwise 3×3 layer on its 64 channels.
  const rand = mulberry32(21);
  const w1 = randomArray(64 * 3 * 9, rand, 0.5), b1 = randomArray(64, rand, 0.1);
  const l1 = await run(device, "Random 3×3, 3→64, bias + ReLU", { inChannels: 3, outChannels: 64, kernel: 3, padding: 1, bias: true, relu: true }, w1, b1, pic.x, shape);
  const w2 = randomArray(64 * 64 * 9, rand, 1 / 24), b2 = randomArray(64, rand, 0.05);
  const l2 = await run(device, "Random 3×3, 64→64, bias + ReLU", { inChannels: 64, outChannels: 64, kernel: 3, padding: 1, bias: true, relu: true }, w2, b2, l1.y, l1.out);
  const c2 = card("Random 3×3 layer, 64 channels");
  page.outputs.random = draw(c2.querySelector("canvas"), thirds(l2.y, 64, hw), 3, h, w, [0, 1, 2], false);
  show(c2, l2.row);
  const w3 = randomArray(64 * 9, rand, 0.4);
  const l3 = await run(device, "Depthwise 3×3, 64 channels", { inChannels: 64, outChannels: 64, kernel: 3, padding: 1, groups: 64 }, w3, undefined, l2.y, l2.out);
  const c3 = card("Depthwise 3×3 layer, 64 channels");
  page.outputs.depthwise = draw(c3.querySelector("canvas"), thirds(l3.y, 64, hw), 3, h, w, [0, 1, 2], false);
  show(c3, l3.row);

  // The tile-size benchmark: each tiled config that fits this device, on one layer.
  setStatus("Benchmarking tile sizes…");
  const bspec = { inChannels: 64, outChannels: 64, kernel: 3, padding: 1 };
  const bshape = [1, 64, 32, 32];
  const wbench = randomArray(64 * 64 * 9, rand, 0.05);
  const chosen = new wasm.Conv(device, bspec, wbench);
  const selected = chosen.kernel;
  chosen.free();
  const sweep = JSON.parse(device.tileSweep(bspec));
  const rows = [];
  const maxConfigs = Number(params.get("configs") || 8);
  for (const s of sweep.filter((s) => s.fits).slice(0, maxConfigs)) {
    const conv = new wasm.Conv(device, { ...bspec, kernelName: s.kernel }, wbench);
    rows.push({ kernel: s.kernel, ms: await conv.bench(bshape, 3) });
    conv.free();
  }
  if (!rows.some((r) => r.kernel === selected) && selected.startsWith("tiled:")) {
    const conv = new wasm.Conv(device, { ...bspec, kernelName: selected }, wbench);
    rows.push({ kernel: selected, ms: await conv.bench(bshape, 3) });
    conv.free();
  }
  page.bench = rows;
  $("benchnote").textContent =
    `The tiled kernel's configs on a 64→64-channel 3×3 layer (input ${bshape.join("×")}), milliseconds per run on ` +
    `data already on the GPU (mean of 3 after a warm-up; performance.now() around a submission ending in a 4-byte ` +
    `read-back). Orange: the config selection chose (${selected}).`;
  $("bench").innerHTML = barChart(rows, selected);
  for (const s of sweep.filter((s) => !s.fits)) {
    const li = document.createElement("li");
    li.textContent = `${s.kernel}: ${s.reason}`;
    $("refused").appendChild(li);
  }
  setStatus(`Done: ${page.timings.length} convolutions and ${rows.length} tile configs on ${info.name}.`);
  finish(Object.values(page.outputs).every(Boolean));
}

main().catch((e) => {
  console.error(`the page failed: ${e?.message ?? e}`);
  setStatus(`Failed: ${e?.message ?? e}`);
  finish(false);
});
