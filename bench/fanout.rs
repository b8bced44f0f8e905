//! Native micro-benchmark of the reader fan-out hot path (`src/engine/live/readers.rs`).
//!
//! 1. Encoding: a frame is SSE-encoded once in `SharedFrame::new` and the same `Rc` is queued
//!    for every reader ("encode once, share", the real `LiveStream`, every reader pulled after
//!    every push so nothing merges), against an *emulation* of the old approach ("encode per
//!    reader": `sse::encode` once per delta per reader, without the stream's bookkeeping).
//! 2. Pull-time merging: 100 readers that are 10 deltas behind pull once (one merged write)
//!    against the same frames pulled after every push (10 writes).
//!
//! Deltas are four UTF-16 units each (ASCII, emoji, CJK). A "delivery" is one delta reaching
//! one reader; each reader's writes are appended to its own buffer, handed off (cleared) past
//! 64 KiB. Timing is `Instant`, best of 5 (1 with `--smoke`).
//!
//! ```text
//! cargo run --release --example fanout             # D = 10,000 deltas
//! cargo run --release --example fanout -- --smoke  # D = 200, one repetition
//! cargo run --release --example fanout -- --json   # a JSON object instead of the table
//! ```

use rindle_streams::engine::host::config::{CheckpointMode, StreamConfig};
use rindle_streams::engine::host::store::{MarkOutcome, StoreRequest};
use rindle_streams::engine::host::time::{Millis, Timestamp};
use rindle_streams::engine::live::{LiveStream, Output, Producer, Pull, ReaderId, StreamState};
use rindle_streams::engine::text::utf16::Offset;
use rindle_streams::engine::wire::frame::Frame;
use rindle_streams::engine::{text::utf16, wire::sse};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// Every input at the same instant: the benchmark measures fan-out, not time.
const T0: Timestamp = Timestamp(0);

const DELTAS: [&str; 4] = ["abcd", "ab😀", "👍🏽", "漢字ab"];
/// A reader's write buffer is handed to the socket (cleared) once it grows past this.
const HAND_OFF: usize = 64 * 1024;
/// Deltas a "behind" reader is behind by in section 2.
const BEHIND: usize = 10;

/// What one timed run did.
#[derive(Debug, Clone, Copy, Default)]
struct Run {
    elapsed: Duration,
    /// Writes handed to readers (pull results with data, or emulated encodes).
    writes: u64,
    bytes: u64,
}

struct Row {
    section: &'static str,
    variant: &'static str,
    readers: usize,
    deltas: usize,
    run: Run,
}

impl Row {
    fn deliveries(&self) -> f64 {
        (self.readers * self.deltas) as f64
    }
    fn us_per_1000(&self) -> f64 {
        self.run.elapsed.as_secs_f64() * 1e6 / (self.deliveries() / 1000.0)
    }
    fn writes_per_1000(&self) -> f64 {
        self.run.writes as f64 * 1000.0 / self.deliveries()
    }
    fn bytes_per_delivery(&self) -> f64 {
        self.run.bytes as f64 / self.deliveries()
    }
}

fn write(out: &mut String, wire: &str, run: &mut Run) {
    run.writes += 1;
    run.bytes += wire.len() as u64;
    out.push_str(wire);
    if out.len() > HAND_OFF {
        black_box(out.as_str());
        out.clear();
    }
}

fn drain(s: &mut LiveStream) {
    while let Some(o) = s.poll_output() {
        black_box(o); // store requests are never answered: no checkpoint gets in the way
    }
}

/// A live sink-mode stream whose checkpoints never come due and whose queues never fill, with
/// `readers` readers attached at 0 and their replay already pulled.
fn live_stream(readers: usize) -> (LiveStream, Vec<ReaderId>) {
    let cfg = StreamConfig {
        checkpoint_chars: Offset(1 << 40),
        checkpoint_interval_ms: Millis(1 << 40),
        idle_timeout_ms: Millis(0),
        max_queued_frames: 1 << 20,
        // Every pull at the same instant: pacing (a separate measurement, BENCHMARKS.md) off.
        reader_pacing_us: 0,
        mode: CheckpointMode::Sink,
        ..StreamConfig::default()
    };
    cfg.validate().expect("a valid config");
    let (mut s, _open) = LiveStream::open("bench", cfg, Producer { host_token: "host-bench".into(), meta: None, chat: None, id: None }, T0);
    while let Some(o) = s.poll_output() {
        match o {
            Output::ArmLease { .. } => s.handle_lease_armed(Ok(()), T0),
            // Sink mode: the mark is the open.
            Output::Store(StoreRequest::MarkStreaming(mark)) => s.handle_store(mark.answer(Ok(MarkOutcome::Marked)), T0),
            _ => {}
        }
    }
    assert_eq!(s.state(), StreamState::Live);
    let ids: Vec<_> = (0..readers).map(|_| s.subscribe(Offset(0))).collect();
    for &id in &ids {
        assert!(matches!(s.pull(id, T0), Pull::Data { .. }), "replay of {id:?}");
    }
    drain(&mut s);
    (s, ids)
}

/// The real path: push every delta, pull every reader after every `batch` pushes.
fn shared(readers: usize, deltas: usize, batch: usize) -> Run {
    let (mut s, ids) = live_stream(readers);
    let mut outs = vec![String::new(); readers];
    let mut run = Run::default();
    let start = Instant::now();
    for i in 0..deltas {
        black_box(s.push(black_box(DELTAS[i % DELTAS.len()]), T0).expect("the stream is live"));
        drain(&mut s);
        if (i + 1) % batch == 0 || i + 1 == deltas {
            for (&id, out) in ids.iter().zip(&mut outs) {
                match s.pull(id, T0) {
                    Pull::Data { wire, .. } => write(out, &wire, &mut run),
                    other => panic!("reader {id:?} got {other:?}"),
                }
            }
        }
    }
    run.elapsed = start.elapsed();
    black_box(&outs);
    run
}

/// Emulation of the old approach: each delta's frame encoded once per reader.
fn per_reader(readers: usize, deltas: usize) -> Run {
    let mut outs = vec![String::new(); readers];
    let mut run = Run::default();
    let mut from = Offset(0);
    let start = Instant::now();
    for i in 0..deltas {
        let text = black_box(DELTAS[i % DELTAS.len()]);
        let seq = from + utf16::len(text);
        let frame = Frame::Chunk { from, seq, text: text.to_owned() };
        for out in &mut outs {
            write(out, &sse::encode(&frame), &mut run);
        }
        from = seq;
    }
    run.elapsed = start.elapsed();
    black_box(&outs);
    run
}

fn best(reps: usize, mut f: impl FnMut() -> Run) -> Run {
    (0..reps).map(|_| f()).min_by_key(|r| r.elapsed).expect("at least one repetition")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let smoke = args.iter().any(|a| a == "--smoke");
    let json = args.iter().any(|a| a == "--json");
    if let Some(bad) = args.iter().find(|a| !matches!(a.as_str(), "--smoke" | "--json")) {
        eprintln!("unknown argument {bad:?}; usage: fanout [--smoke] [--json]");
        std::process::exit(2);
    }
    let (deltas, reps) = if smoke { (200, 1) } else { (10_000, 5) };

    let mut rows = Vec::new();
    for readers in [10, 100] {
        let row = |variant, run| Row { section: "encoding", variant, readers, deltas, run };
        rows.push(row("before: encode per reader (emulated)", best(reps, || per_reader(readers, deltas))));
        rows.push(row("after: encode once, share", best(reps, || shared(readers, deltas, 1))));
    }
    let readers = 100;
    let row = |variant, run| Row { section: "merging", variant, readers, deltas, run };
    rows.push(row("pull after every push (10 writes)", best(reps, || shared(readers, deltas, 1))));
    rows.push(row("pull once per 10 pushes (merged)", best(reps, || shared(readers, deltas, BEHIND))));

    let speedup = |before: &Row, after: &Row| before.us_per_1000() / after.us_per_1000();
    let notes = [
        format!("encode once vs per reader, R=10: {:.1}x", speedup(&rows[0], &rows[1])),
        format!("encode once vs per reader, R=100: {:.1}x", speedup(&rows[2], &rows[3])),
        format!("merged vs separate writes, R=100, {BEHIND} behind: {:.1}x", speedup(&rows[4], &rows[5])),
    ];
    // The smoke run (scripts/test.sh) reuses `cargo test`'s build: its figures are not the record's.
    let profile = if cfg!(debug_assertions) {
        "test profile (opt-level 2, debug assertions): not comparable"
    } else {
        "release profile (opt-level z, LTO)"
    };
    let caveat = format!(
        "\"before\" is an emulation (sse::encode per delta per reader, none of the stream's bookkeeping), \
         not the old code; {profile}, native, best of the repetitions"
    );

    if json {
        let rows: Vec<_> = rows
            .iter()
            .map(|r| {
                serde_json::json!({
                    "section": r.section, "variant": r.variant, "readers": r.readers, "deltas": r.deltas,
                    "us_per_1000_deliveries": r.us_per_1000(), "writes_per_1000_deliveries": r.writes_per_1000(),
                    "bytes_per_delivery": r.bytes_per_delivery(),
                })
            })
            .collect();
        let report = serde_json::json!({ "deltas": deltas, "repetitions": reps, "rows": rows, "notes": notes, "caveat": caveat });
        println!("{}", serde_json::to_string_pretty(&report).expect("a report serializes"));
        return;
    }
    println!("fan-out of D={deltas} four-UTF-16-unit deltas, best of {reps}\n");
    println!("| section | variant | R | µs / 1,000 deliveries | writes / 1,000 deliveries | bytes / delivery |");
    println!("|---|---|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {} | {} | {:.1} | {:.0} | {:.1} |",
            r.section,
            r.variant,
            r.readers,
            r.us_per_1000(),
            r.writes_per_1000(),
            r.bytes_per_delivery()
        );
    }
    println!();
    for n in &notes {
        println!("- {n}");
    }
    println!("- {caveat}");
}
