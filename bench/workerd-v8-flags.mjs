#!/usr/bin/env node
// Adds V8 flags to the binary workerd config that miniflare writes to workerd's stdin (the
// config's `v8Flags`, which miniflare never sets and wrangler has no option for). Used by
// bench/workerd-v8-flags.sh, for profiling only: `--perf-basic-prof` names the code V8 generates
// (rindle's wasm functions, the JavaScript glue) in `perf report`, where it is otherwise one
// anonymous "[JIT]" block. Reads the config on stdin, writes it with the flags on stdout.
//
// The config is a Cap'n Proto message (unpacked, standard framing). The flags are appended to
// the end of segment 0 as a List(Text) and the root struct's `v8Flags` pointer (pointer 2 of
// `Config`, workerd's src/workerd/server/workerd.capnp) is pointed at it. Growing segment 0 at
// its end moves no pointer: near pointers are relative within a segment, far ones name a
// segment and an offset in it.
import { readFileSync } from 'node:fs';

const V8_FLAGS_POINTER = 2;

/** The flags that make V8 write /tmp/perf-<pid>.map; the map also switches V8's event log on, one
 * file per isolate in the working directory, which these send nowhere. */
export const PERF_MAP_FLAGS = '--perf-basic-prof --no-logfile-per-isolate --logfile=/dev/null';

/** `config` (a Buffer) with `flags` as its v8Flags; throws if the message is not as expected. */
export function withV8Flags(config, flags) {
  const segments = config.readUInt32LE(0) + 1;
  const sizes = Array.from({ length: segments }, (_, i) => config.readUInt32LE(4 + 4 * i));
  const headerBytes = Math.ceil((4 + 4 * segments) / 8) * 8;
  const seg0 = config.subarray(headerBytes, headerBytes + sizes[0] * 8);
  const rest = config.subarray(headerBytes + sizes[0] * 8);
  const words = (buf) => buf.length / 8;

  // The root pointer (word 0 of segment 0) must be a near struct pointer.
  const root = seg0.readBigUInt64LE(0);
  if ((root & 3n) !== 0n) throw new Error('workerd-v8-flags: the root pointer is not a near struct pointer');
  const offset = Number(BigInt.asIntN(30, (root >> 2n) & 0x3fffffffn));
  const dataWords = Number((root >> 32n) & 0xffffn);
  const pointerCount = Number((root >> 48n) & 0xffffn);
  if (pointerCount <= V8_FLAGS_POINTER) throw new Error('workerd-v8-flags: the config has no v8Flags pointer');
  const slot = 1 + offset + dataWords + V8_FLAGS_POINTER; // word index of the v8Flags pointer
  if (seg0.readBigUInt64LE(slot * 8) !== 0n) throw new Error('workerd-v8-flags: v8Flags is already set');

  // The list of pointers, then each flag's bytes (NUL-terminated, padded to a word).
  const texts = flags.map((f) => Buffer.from(`${f}\0`, 'utf8'));
  const textWords = texts.map((t) => Math.ceil(t.length / 8));
  const extra = Buffer.alloc(8 * (flags.length + textWords.reduce((a, b) => a + b, 0)));
  const listStart = words(seg0);
  let textAt = listStart + flags.length;
  texts.forEach((text, i) => {
    const at = listStart + i; // this element's pointer, at word `at`
    extra.writeBigUInt64LE(listPointer(textAt - (at + 1), 2, text.length), 8 * i);
    text.copy(extra, 8 * (textAt - listStart));
    textAt += textWords[i];
  });
  const patched = Buffer.concat([seg0, extra]);
  patched.writeBigUInt64LE(listPointer(listStart - (slot + 1), 6, flags.length), slot * 8);

  const header = Buffer.from(config.subarray(0, headerBytes));
  header.writeUInt32LE(words(patched), 4);
  return Buffer.concat([header, patched, rest]);
}

/** A near list pointer: `offset` words from the end of the pointer, element size code, count. */
function listPointer(offset, elementSize, count) {
  return 1n | (BigInt.asUintN(30, BigInt(offset)) << 2n) | (BigInt(elementSize) << 32n) | (BigInt(count) << 35n);
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const flags = (process.env.WORKERD_V8_FLAGS ?? '').split(/\s+/).filter(Boolean);
  const config = readFileSync(0);
  process.stdout.write(flags.length ? withV8Flags(config, flags) : config);
}
