// Browser tests of wgconv's wasm package on the browser's WebGPU adapter: shapes against
// the CPU reference (stride, padding, dilation, groups, bias + ReLU) on the adapter's limits
// and on WebGPU's default limits, refusals that name the limit, a batch split under the
// binding limit, features detected rather than assumed, and the example page end to end.
//
// Each check prints `PASS name` or `FAIL name: shape … seed …: why`; the last line is
// `N passed, M failed`. Where the page was served by scripts/web_server.py, every line is
// also POSTed to it (/log), and the summary to /report, which is how
// `bash scripts/web.sh test` reads the results of a headless browser.

import { mulberry32 } from "./random.js";
import init, { Device, Conv, reference, version, toF16, fromF16 } from "./pkg/wgconv_web.js";

const params = new URLSearchParams(location.search);
const baseSeed = Number(params.get("seed") ?? Math.floor(Math.random() * 1e9));
const results = { passed: 0, failed: 0, lines: [], seed: baseSeed, timings: [] };
window.wgconvTests = { done: false, results };

function post(path, body) {
  return fetch(path, { method: "POST", body, headers: { "content-type": "text/plain" } }).catch(() => {});
}
function log(line, cls) {
  results.lines.push(line);
  const el = document.createElement("div");
  if (cls) el.className = cls;
  el.textContent = line;
  document.getElementById("log").appendChild(el);
  return post("/log", line);
}

// Runs one check: `fn` returns nothing (pass) or throws; `what` names the shape and seed
// printed on failure.
async function check(name, what, fn) {
  const t = performance.now();
  try {
    await fn();
    results.passed++;
    await log(`PASS ${name} (${(performance.now() - t).toFixed(0)} ms)`, "pass");
  } catch (e) {
    results.failed++;
    await log(`FAIL ${name}: ${what}: ${e?.message ?? e}`, "fail");
  }
}

function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

function randn(n, rand, scale = 1) {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (rand() * 2 - 1) * scale;
  return a;
}

// The native suite's comparison: relative L2 error within 1e-5 (f32), and no NaN
// (unwritten outputs).
function compare(got, want, tol = 1e-5) {
  assert(got.length === want.length, `output has ${got.length} values, the reference ${want.length}`);
  let num = 0, den = 0, nan = 0;
  for (let i = 0; i < got.length; i++) {
    if (Number.isNaN(got[i])) nan++;
    const d = got[i] - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  assert(nan === 0, `${nan} NaN outputs`);
  const err = Math.sqrt(num / Math.max(den, 1e-30));
  assert(err <= tol, `relative L2 error ${err.toExponential(2)} > ${tol}`);
  return err;
}

const pair = (v) => (Array.isArray(v) ? v : [v ?? 1, v ?? 1]);

// A convolution on random data, against the CPU reference; returns the kernel that ran.
async function againstReference(device, spec, shape, seed, expectFamily) {
  const rand = mulberry32(seed);
  const [kh, kw] = pair(spec.kernel);
  const groups = spec.groups ?? 1;
  const weight = randn(spec.outChannels * (spec.inChannels / groups) * kh * kw, rand);
  const bias = spec.bias ? randn(spec.outChannels, rand) : undefined;
  const x = randn(shape.reduce((a, b) => a * b), rand);
  const conv = new Conv(device, spec, weight, bias);
  try {
    const got = await conv.forward(x, shape);
    const want = reference(spec, weight, bias, x, shape);
    compare(got, want);
    if (expectFamily) assert(conv.kernel.startsWith(expectFamily), `ran ${conv.kernel}, expected the ${expectFamily} family`);
    if (spec.relu) assert(got.every((v) => v >= 0), "ReLU left negative outputs");
    return conv.kernel;
  } finally {
    conv.free();
  }
}

const CASES = [
  ["3x3, padding 1", { inChannels: 3, outChannels: 8, kernel: 3, padding: 1 }, [2, 3, 9, 11]],
  ["stride 2", { inChannels: 4, outChannels: 6, kernel: 3, stride: 2, padding: 1 }, [1, 4, 15, 13]],
  ["asymmetric padding (ONNX pads)", { inChannels: 3, outChannels: 5, kernel: 3, padding: [0, 1, 2, 0] }, [1, 3, 10, 7]],
  ["dilation 2", { inChannels: 5, outChannels: 7, kernel: 3, dilation: 2, padding: 2 }, [1, 5, 12, 12]],
  ["rectangular kernel, stride (1, 2)", { inChannels: 3, outChannels: 4, kernel: [3, 5], stride: [1, 2], padding: [1, 2] }, [2, 3, 11, 17]],
  ["groups 2", { inChannels: 8, outChannels: 12, kernel: 3, padding: 1, groups: 2 }, [1, 8, 9, 9]],
  ["depthwise (groups = channels)", { inChannels: 16, outChannels: 16, kernel: 3, padding: 1, groups: 16 }, [2, 16, 10, 10], "depthwise"],
  ["depthwise, multiplier 2, stride 2", { inChannels: 8, outChannels: 16, kernel: 3, stride: 2, padding: 1, groups: 8 }, [1, 8, 13, 13], "depthwise"],
  ["bias + ReLU", { inChannels: 6, outChannels: 10, kernel: 3, padding: 1, bias: true, relu: true }, [2, 6, 8, 8]],
  ["1x1, 32→48", { inChannels: 32, outChannels: 48, kernel: 1 }, [1, 32, 7, 9]],
  // The pointwise family (README, "Which kernel runs", under rule 6): a CPU adapter runs 1x1
  // layers of at least 128 positions by it; planes of whole vectors of 4 positions and not.
  ["1x1 over 288 positions, bias", { inChannels: 24, outChannels: 20, kernel: 1, bias: true }, [2, 24, 12, 12], "pointwise"],
  ["1x1 over 143 positions, ReLU", { inChannels: 40, outChannels: 12, kernel: 1, relu: true }, [1, 40, 11, 13], "pointwise"],
  // Winograd (README, "Which kernel runs", rule 4): a CPU adapter (SwiftShader) runs 3x3
  // stride-1 layers of 16 channels and more by it, a GPU where its estimate wins, as it does
  // on this small layer at the rates assumed for GPUs the table of declared rates does not
  // list (browsers do not name their adapter); either family, `winograd` or `winograd-f4`
  // (the prefix matches both).
  ["64→64 3x3, bias + ReLU", { inChannels: 64, outChannels: 64, kernel: 3, padding: 1, bias: true, relu: true }, [1, 64, 12, 12],
    "winograd"],
  ["AlexNet-like 11x11 stride 4", { inChannels: 3, outChannels: 96, kernel: 11, stride: 4, padding: 2, bias: true }, [1, 3, 63, 63]],
  ["the direct kernel, named", { inChannels: 4, outChannels: 6, kernel: 3, padding: 1, kernelName: "direct" }, [1, 4, 9, 9], "direct"],
];

async function main() {
  await init();
  await log(`wgconv-web ${version()}, seed ${baseSeed} (replay: tests.html?seed=${baseSeed})`);
  if (!("gpu" in navigator)) {
    results.failed++;
    await log("FAIL webgpu: navigator.gpu is missing: this browser has no WebGPU", "fail");
    return;
  }
  const adapter = await Device.open("adapter");
  const small = await Device.open("default");
  const info = JSON.parse(adapter.info());
  const dinfo = JSON.parse(small.info());
  await log(`adapter: ${info.name} (${info.deviceType}); features ${JSON.stringify(info.features)}`);
  await log(`adapter limits: ${JSON.stringify(info.limits)}`);

  await check("device info names the adapter and backend", "-", () => {
    assert(info.name && info.name.length > 0, "the adapter has no name");
    assert(info.backend === "BrowserWebGpu", `backend ${info.backend}`);
  });
  await check("default limits are WebGPU's", "-", () => {
    const L = dinfo.limits;
    assert(L.maxComputeWorkgroupStorageSize === 16384, `workgroup storage ${L.maxComputeWorkgroupStorageSize}`);
    assert(L.maxComputeInvocationsPerWorkgroup === 256, `invocations ${L.maxComputeInvocationsPerWorkgroup}`);
    assert(L.maxStorageBuffersPerShaderStage === 8, `storage buffers ${L.maxStorageBuffersPerShaderStage}`);
    assert(L.maxStorageBufferBindingSize === 128 * 2 ** 20, `binding size ${L.maxStorageBufferBindingSize}`);
    assert(L.maxComputeWorkgroupsPerDimension === 65535, `workgroups ${L.maxComputeWorkgroupsPerDimension}`);
  });

  // Every shape on both devices: the adapter's limits and WebGPU's defaults (where the
  // selection must keep to 16 KiB of workgroup memory and 256 invocations).
  let i = 0;
  for (const [dev, label] of [[adapter, "adapter limits"], [small, "default limits"]]) {
    for (const [name, spec, shape, expected] of CASES) {
      const family = typeof expected === "function" ? expected(info) : expected;
      const seed = baseSeed + i++;
      await check(`${name} [${label}]`, `spec ${JSON.stringify(spec)} input [${shape}] seed ${seed}`, async () => {
        const k = await againstReference(dev, spec, shape, seed, family);
        results.timings.push({ name, label, kernel: k });
      });
    }
  }

  const dense = { inChannels: 64, outChannels: 64, kernel: 3, padding: 1 };
  await check("a config over the default workgroup memory is refused, naming the limit", JSON.stringify(dense), () => {
    // 17,920 B of workgroup memory: the tiled config selection prefers on CPU adapters.
    const why = small.checkKernel("tiled:m64n64k16-t8x8-w2-s2", dense);
    assert(why, "refused nothing");
    assert(why.includes("17920 B") && why.includes("max_compute_workgroup_storage_size"), why);
    let threw = "";
    try { new Conv(small, { ...dense, kernelName: "tiled:m64n64k16-t8x8-w2-s2" }, new Float32Array(64 * 64 * 9)); } catch (e) { threw = e.message; }
    assert(threw.includes("max_compute_workgroup_storage_size"), `Conv accepted it, or said: ${threw}`);
  });
  await check("a config over the default invocations is refused, naming the limit", JSON.stringify(dense), () => {
    // 256 × 96 blocks of 4 × 12 outputs per invocation: 512 invocations.
    const why = small.checkKernel("tiled:m256n96k8-t4x12-w16-s1", dense) ?? "";
    assert(why.includes("512 invocations") && why.includes("max_compute_invocations_per_workgroup"), why || "refused nothing");
  });
  await check("every refusal of the tile sweep names a limit; selection picks a config that fits", JSON.stringify(dense), () => {
    const sweep = JSON.parse(small.tileSweep(dense));
    const refused = sweep.filter((s) => !s.fits);
    assert(refused.length > 0, "the default limits refused no config of the sweep");
    for (const s of refused) assert(/max_[a-z_]+/.test(s.reason), `${s.kernel}: ${s.reason}`);
    const conv = new Conv(small, dense, new Float32Array(64 * 64 * 9));
    const k = conv.kernel, src = conv.source, why = conv.reason;
    conv.free();
    assert(small.checkKernel(k, dense) === undefined, `selection chose ${k}, which does not fit`);
    if (src === "fallback") assert(/max_[a-z_]+/.test(why), `fallback without naming the limit: ${why}`);
    results.timings.push({ name: "default-limits selection", kernel: k, source: src, reason: why });
  });
  await check("f16 is refused where the device lacks shader-f16 (detected, not assumed)", "-", async () => {
    const f16 = JSON.parse(adapter.info()).features["shader-f16"];
    const spec = { inChannels: 4, outChannels: 4, kernel: 3, padding: 1, precision: "f16" };
    if (f16) {
      await againstReference(adapter, { ...spec, precision: undefined }, [1, 4, 6, 6], baseSeed);
      return;
    }
    let threw = "";
    try { new Conv(adapter, spec, new Float32Array(4 * 4 * 9)); } catch (e) { threw = e.message; }
    assert(threw.includes("SHADER_F16"), `no refusal naming SHADER_F16: ${threw}`);
  });
  // f16 storage: f16 tensors in and out (the passes around the kernel convert them; no
  // shader-f16 needed), against the reference on the f16-rounded input, at f16's rounding.
  const f16spec = { inChannels: 5, outChannels: 6, kernel: 3, padding: 1, bias: true, storage: "f16" };
  const f16shape = [2, 5, 9, 7];
  const f16seed = baseSeed + 2000;
  await check("f16 storage: f16 tensors in and out, on odd sizes", `spec ${JSON.stringify(f16spec)} input [${f16shape}] seed ${f16seed}`, async () => {
    const rand = mulberry32(f16seed);
    const weight = randn(6 * 5 * 9, rand), bias = randn(6, rand);
    const xBits = toF16(randn(f16shape.reduce((a, b) => a * b), rand));
    const conv = new Conv(adapter, f16spec, weight, bias);
    try {
      assert(conv.storage === "f16", `storage ${conv.storage}`);
      const got = fromF16(await conv.forwardF16(xBits, f16shape));
      compare(got, reference(f16spec, weight, bias, fromF16(xBits), f16shape), 2e-3);
      let threw = "";
      try { await conv.forward(new Float32Array(xBits.length), f16shape); } catch (e) { threw = e.message; }
      assert(threw.includes("forward_f16"), `an f32 forward on an f16 op: ${threw}`);
    } finally {
      conv.free();
    }
  });
  await check("a wrong input length is an error, not a crash", "-", async () => {
    const conv = new Conv(adapter, { inChannels: 2, outChannels: 2, kernel: 1 }, new Float32Array(4));
    let threw = "";
    try { await conv.forward(new Float32Array(7), [1, 2, 2, 2]); } catch (e) { threw = e.message; }
    conv.free();
    assert(threw.includes("expected 8"), threw);
  });

  // A batch over the binding limit (128 MiB by default): 33 images of 2×512×1024 floats
  // (4 MiB each) are 132 MiB in and out, so the op splits the batch.
  const split = { inChannels: 2, outChannels: 2, kernel: 3, padding: 1, groups: 2, bias: true };
  const bshape = [33, 2, 512, 1024];
  const sseed = baseSeed + 1000;
  await check("a batch over the 128 MiB binding limit is split and still correct", `spec ${JSON.stringify(split)} input [${bshape}] seed ${sseed}`, async () => {
    const rand = mulberry32(sseed);
    const weight = randn(2 * 9, rand), bias = randn(2, rand);
    const x = randn(bshape.reduce((a, b) => a * b), rand);
    assert(x.length * 4 > dinfo.limits.maxStorageBufferBindingSize, "the batch fits the binding limit");
    const conv = new Conv(small, split, weight, bias);
    try {
      const chunks = conv.chunks(bshape);
      assert(chunks >= 2, `${chunks} chunk(s)`);
      const t = performance.now();
      const got = await conv.forward(x, bshape);
      results.timings.push({ name: "split batch", kernel: conv.kernel, chunks, ms: performance.now() - t });
      compare(got, reference(split, weight, bias, x, bshape));
    } finally {
      conv.free();
    }
  });

  // Loads the example page in an iframe and waits until it says it is done.
  async function loadPage(url) {
    const frame = document.createElement("iframe");
    frame.src = url;
    document.body.appendChild(frame);
    const start = performance.now();
    let page;
    while (!(page = frame.contentWindow?.wgconvPage)?.done) {
      assert(performance.now() - start < 300000, "the page did not finish in 300 s");
      await new Promise((r) => setTimeout(r, 250));
    }
    return { page, doc: frame.contentDocument };
  }

  await check("without WebGPU the page says so (no blank page)", "index.html?without-webgpu", async () => {
    const { page, doc } = await loadPage("index.html?without-webgpu");
    const box = doc.getElementById("nowebgpu");
    assert(page.noWebGpu, "the page did not take the no-WebGPU path");
    assert(box.style.display === "block" && box.textContent.includes("cannot run WebGPU"), `message: ${box.textContent}`);
  });

  await check("the example page end to end: picture in, pictures out, no console errors", "index.html", async () => {
    const { page } = await loadPage("index.html?configs=4");
    assert(page.errors.length === 0, `console errors: ${page.errors.join(" | ")}`);
    for (const [k, v] of Object.entries(page.outputs)) assert(v, `the ${k} image is flat`);
    assert(Object.keys(page.outputs).length === 5, `outputs: ${Object.keys(page.outputs)}`);
    assert(page.bench?.length > 0 && page.bench.every((r) => r.ms > 0), "no benchmark bars");
    assert(page.ok, "the page says it failed");
    for (const t of page.timings) results.timings.push({ page: t.title, input: t.input, kernel: t.kernel, first: t.first, second: t.second });
    results.timings.push({ bench: page.bench });
  });
}

main()
  .catch(async (e) => {
    results.failed++;
    await log(`FAIL test harness: ${e?.message ?? e}`, "fail");
  })
  .finally(async () => {
    const summary = `${results.passed} passed, ${results.failed} failed`;
    document.getElementById("summary").textContent = summary;
    window.wgconvTests.done = true;
    await post("/report", JSON.stringify({ ...results, summary }));
  });
