#!/usr/bin/env node
// Where the time goes: a CPU profile of the Worker's isolate (the front Worker and the stream's
// Durable Object run in one isolate under wrangler dev) taken through the V8 inspector that
// wrangler dev exposes, with the DevTools protocol's Profiler domain, while bench.mjs's fan-out
// scenario runs. The samples are attributed to what the code was doing (routing, config, JWT,
// body relay, D1, reader wake-ups, …) and to how (wasm, JS glue, runtime built-ins), and
// compared with the process CPU that /proc reports for the same window.
//
//   node bench/profile.mjs --plain --readers 10            # one POST per delta, 10 readers
//   node bench/profile.mjs --readers 1                     # one streaming append, 1 reader
//   node bench/profile.mjs --side floor --plain            # the floor under the same load
//   node bench/profile.mjs --readers 10 --save out.cpuprofile   # also save the raw profile
//   node bench/profile.mjs --json                          # the breakdown as JSON
//   node bench/profile.mjs --analyze out.cpuprofile        # the breakdown of a saved profile
//
// Options: --rate N (deltas/s, default 100), --seconds N (default 10), --interval µs (sampling
// interval, default 200), --var KEY=VALUE (a Worker var, repeatable). Shares are valid on a
// busy machine; absolute milliseconds are not (the sampler itself costs a few percent).
import { readFileSync, writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { fanout, loadFromArgs, onFreshStack } from './bench.mjs';
import { connectInspector } from './inspector.mjs';

// ---------------------------------------------------------------------------------------
// Attribution

/**
 * What the code was doing: the nearest frame on the stack (leaf first) that one of these
 * names. Function names are the wasm name section's (Rust paths) and the runtime's
 * JavaScript built-ins. Order matters only between rules that can match the same frame.
 */
const PURPOSES = [
  ['JWT', /jsonwebtoken|::auth::|jwt_crypto|hmac|sha2|base64/],
  ['config', /Settings::from_vars|setup::var\b|ColumnNames|TableMapping|Setup::from_env|Env::var|Env::secret|object_var/],
  ['D1 rounds', /edge::store::|D1Database|D1PreparedStatement|durable::sql::|MappedSql|run_store/],
  ['JSON', /serde_json|serde::|sse::encode|merge_wire|SharedFrame::new|^stringify$|^parse$/],
  ['UTF-8/UTF-16', /core::utf8|core::utf16|TextBuffer|from_utf8|Utf8Reassembler|TextDecoder|TextEncoder|encodeInto|^decode$|^encode$|from_abi|StringFromWasm|StringToWasm/],
  ['body relay', /edge::forward|byte_relay|discard_unread|append_streaming|^pipeTo$|IdentityTransformStream|AbortController|^abort$|^arrayBuffer$|Request::bytes|ByteStream|into_stream/],
  ['reader wake-ups', /ReaderBody|Shell::pull|Shell::park_reader|Readers::|IntoUnderlyingSource|intounderlyingsource|MapErr|^enqueue$|^pull$|wasm_streams/],
  ['response building', /edge::http::json|edge::http::error|from_json|ResponseBuilder|worker::response|for web_sys::features::gen_Response|Headers|^Response$|ApiError::body|^json$/],
  ['routing', /core::api::route|http::Target|http::token|id_from_name|idFromName|get_stub|durable_object|fetch_with_request|Fetcher|stream_id::|edge::route|worker::request::Request as core::convert::From|path_from_url|^fetch$|^URL$/],
  ['live stream (core)', /core::live::|Shell::|LiveStream/],
];

/** Frames that only carry work between the others: task queue, promises, closures. */
const PLUMBING = /future_to_promise|futures::queue|Queue::|singlethread|JsFuture|queueMicrotask|Promise|^__name$|closure|Closure|convert::closures|^then$/;

/** How the code was running: the leaf frame's kind. */
function mechanism(frame, atRoot) {
  const name = frame.functionName;
  if (name === '(garbage collector)') return 'GC';
  if (name === '(idle)') return 'idle';
  // Samples with no JavaScript or wasm on the stack: the runtime's own C++ (HTTP, streams, I/O).
  if (name === '(program)' || name === '(root)' || (atRoot && !name && !frame.url)) return 'runtime C++';
  if (frame.url.includes('.wasm') || /::h[0-9a-f]{16}$|^__rustc|^__rdl|^__rust|^__externref|^dlmalloc|^memcpy|^memset|^memmove/.test(name)) {
    return 'wasm';
  }
  if (/^wasm-to-js|^js-to-wasm/.test(name) || frame.url.includes('shim') || frame.url.includes('index.js')) return 'JS↔wasm glue';
  if (!frame.url) return 'runtime built-ins';
  return 'other JavaScript';
}

/** Shares of the samples in `profile` (a DevTools CPU profile) by purpose and by mechanism. */
export function attribute(profile) {
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const parent = new Map();
  for (const n of profile.nodes) for (const c of n.children ?? []) parent.set(c, n.id);
  const label = (id) => byId.get(id).callFrame.functionName.replace(/::h[0-9a-f]{16}.*$/, '');
  // The nearest purpose on the stack; failing that, plumbing; failing that, unattributed.
  const memo = new Map();
  const classify = (id) => {
    if (memo.has(id)) return memo.get(id);
    let purpose;
    let plumbing = false;
    for (let at = id; at !== undefined && !purpose; at = parent.get(at)) {
      const name = label(at);
      purpose = PURPOSES.find(([, re]) => re.test(name))?.[0];
      plumbing ||= PLUMBING.test(name);
    }
    const what = purpose ?? (plumbing ? 'async plumbing (promises, task queue)' : 'unattributed JavaScript/wasm');
    memo.set(id, what);
    return what;
  };
  // Each sample counts once. The sampler thread is starved on a busy machine, so the gaps
  // between samples (timeDeltas) vary widely and weighting by them would let a few samples
  // taken after a long gap dominate; counts are an unbiased estimate of the shares.
  const purposes = {};
  const mechanisms = {};
  const matrix = {};
  const functions = {};
  const byPurpose = {};
  let busy = 0;
  let total = 0;
  const add = (o, k) => (o[k] = (o[k] ?? 0) + 1);
  for (const id of profile.samples) {
    const frame = byId.get(id).callFrame;
    const how = mechanism(frame, byId.get(parent.get(id))?.callFrame.functionName === '(root)');
    total++;
    if (how === 'idle') continue;
    busy++;
    const what = how === 'runtime C++' || how === 'GC' ? `(${how})` : classify(id);
    add(purposes, what);
    add(mechanisms, how);
    add((matrix[what] ??= {}), how);
    add(functions, label(id) || '(anonymous)');
    add((byPurpose[what] ??= {}), label(id) || '(anonymous)');
  }
  const share = (o) => Object.fromEntries(Object.entries(o).sort((a, b) => b[1] - a[1]).map(([k, v]) => [k, { samples: v, share: Math.round((v / busy) * 1000) / 10 }]));
  return {
    samples: total,
    busySamples: busy,
    purposes: share(purposes),
    mechanisms: share(mechanisms),
    matrix: Object.fromEntries(Object.entries(matrix).map(([k, v]) => [k, share(v)])),
    topFunctions: Object.fromEntries(Object.entries(share(functions)).slice(0, 25)),
    topFunctionsByPurpose: Object.fromEntries(Object.entries(byPurpose).map(([k, v]) => [k, Object.fromEntries(Object.entries(share(v)).slice(0, 4))])),
  };
}

/** The breakdown as text. */
export function formatAttribution(a, header = '') {
  const lines = [];
  if (header) lines.push(header);
  lines.push(`${a.busySamples} busy samples of ${a.samples} (the rest idle)`, '', '| what | samples | share | of which (how) |', '|---|---|---|---|');
  for (const [what, { samples, share }] of Object.entries(a.purposes)) {
    const how = Object.entries(a.matrix[what] ?? {})
      .map(([k, v]) => `${k} ${v.share}%`)
      .join(', ');
    lines.push(`| ${what} | ${samples} | ${share}% | ${how} |`);
  }
  lines.push('', '| how | samples | share |', '|---|---|---|');
  for (const [how, { samples, share }] of Object.entries(a.mechanisms)) lines.push(`| ${how} | ${samples} | ${share}% |`);
  lines.push('', 'where each is spent (self samples of its top functions):');
  for (const [what, fns] of Object.entries(a.topFunctionsByPurpose)) {
    lines.push(`  ${what}: ${Object.entries(fns).map(([fn, { samples }]) => `${fn.slice(0, 70) || '(anonymous)'} ${samples}`).join('; ')}`);
  }
  lines.push('', 'top functions (self):');
  for (const [fn, { samples, share }] of Object.entries(a.topFunctions)) lines.push(`  ${String(share).padStart(5)}%  ${String(samples).padStart(7)}  ${fn.slice(0, 140)}`);
  return lines.join('\n');
}

// ---------------------------------------------------------------------------------------
// The run

/**
 * Profiles one fan-out run on a fresh stack of `side` ('rindle' or 'floor'). Returns the
 * fan-out's figures, the attribution, the raw profile, and the process CPU for the window.
 */
export async function profileRun({ side = 'rindle', readers = 1, rate = 100, seconds = 10, plain = false, intervalUs = 200, vars = {} }) {
  return onFreshStack(
    side,
    async (target) => {
      const session = await connectInspector(target.stack.inspectorPort);
      let profile;
      const during = {
        start: async () => {
          await session.send('Profiler.enable');
          await session.send('Profiler.setSamplingInterval', { interval: intervalUs });
          await session.send('Profiler.start');
        },
        stop: async () => {
          profile = (await session.send('Profiler.stop')).profile;
        },
      };
      try {
        const run = await fanout(target, { readers, rate, seconds, plain, during });
        return { run, profile, attribution: attribute(profile) };
      } finally {
        await session.close();
      }
    },
    { vars },
  );
}

async function main() {
  const { load, values } = loadFromArgs(process.argv.slice(2), { seconds: 10, strings: ['side', 'save', 'analyze', 'interval'] });
  if (values.analyze) {
    const a = attribute(JSON.parse(readFileSync(values.analyze, 'utf8')));
    process.stdout.write(`${values.json ? JSON.stringify(a, null, 2) : formatAttribution(a)}\n`);
    return;
  }
  const options = { ...load, side: values.side ?? 'rindle', intervalUs: Number(values.interval ?? 200) };
  const { run, profile, attribution } = await profileRun(options);
  if (values.save) writeFileSync(values.save, JSON.stringify(profile));
  const summary = `${options.side}, ${options.plain ? 'one POST per delta' : 'one streaming append'}, ${options.readers} readers, ${options.rate}/s offered for ${options.seconds} s: achieved ${run.achievedRate}/s, p50 ${run.p50} ms, p99 ${run.p99} ms, ${run.deliveries}/${run.expectedDeliveries} deliveries${run.appendP50 !== undefined ? `, append answered p50 ${run.appendP50} ms p99 ${run.appendP99} ms` : ''}; workerd CPU ${run.cpuMs} ms (${run.cpuMsPer1000Deliveries} ms / 1k deliveries)`;
  if (values.json) process.stdout.write(`${JSON.stringify({ options, run, attribution }, null, 2)}\n`);
  else process.stdout.write(`${formatAttribution(attribution, summary)}\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  main().catch((e) => {
    process.stderr.write(`profile: ${e.stack ?? e}\n`);
    process.exit(1);
  });
}
