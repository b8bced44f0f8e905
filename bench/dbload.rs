//! The curve of one database (SPEC §13): how many answers one database carries at once, measured
//! natively in virtual time on the engine's own streams, real SQLite (or PostgreSQL) behind the
//! model of the database (`src/engine/durable/model.rs`), driven by `tests/support/fleet.rs`.
//!
//! For each write time (2, 4, 8 ms), each cadence (today's fixed one: `CHECKPOINT_MAX_STRETCH=1`,
//! `STORE_PATIENCE_MS=0`; the adaptive default) and each number of answers, a wave of answers at
//! 30 tokens a second for 20-60 s, starting over 20 s: checkpoint lag p50/p99, flush and close
//! latency p99, statements a second, and answers failed, interrupted or left `streaming`. The
//! ceiling of a cadence is the most answers with none failed and lag p99 within 5 s. Then the
//! shards: 10,000 answers over enough databases. Writes a JSON report and the plot (SVG) drawn
//! from it.
//!
//! ```text
//! cargo run --release --example dbload                          # the curve and the shards (~15 min on 2 cores)
//! cargo run --release --example dbload -- --smoke               # two small points (the test command)
//! cargo run --release --example dbload -- --answers 500,1000 --write-ms 4 --cadence adaptive
//! cargo run --release --example dbload -- --arrival steady      # N slots kept full for 120 s instead of a wave
//! cargo run --release --example dbload -- --backend postgres    # PostgreSQL behind a Hyperdrive pool model (RINDLE_PG_URL)
//! cargo run --release --example dbload -- --out bench/results/2026-12-07-dbload   # writes .json and .svg
//! ```

#[path = "../tests/support/mod.rs"]
#[allow(unused_imports)]
mod support;

use rindle_streams::engine::durable::model::Capacity;
use rindle_streams::engine::host::config::StreamConfig;
use rindle_streams::engine::host::time::Millis;
use std::fmt::Write as _;
use support::fleet::{Arrival, Fleet, Plan, Report, Shard};

/// The acceptance's bound on the lag's p99.
const LAG_BOUND_S: f64 = 5.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Cadence {
    Fixed,
    Adaptive,
}

impl Cadence {
    fn stream(self) -> StreamConfig {
        match self {
            // Today's engine: the cadence never stretches, load is retried like any failure.
            Cadence::Fixed => StreamConfig { checkpoint_max_stretch: 1, store_patience_ms: Millis::ZERO, ..StreamConfig::default() },
            Cadence::Adaptive => StreamConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Sqlite,
    Postgres,
}

#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Point {
    write_ms: f64,
    cadence: Cadence,
    seed: u64,
    #[serde(flatten)]
    report: Report,
}

impl Point {
    fn failed(&self) -> usize {
        let r = &self.report;
        r.open_failed + r.close_failed + r.interrupted + r.left_streaming + r.text_mismatches
    }

    fn holds(&self) -> bool {
        self.failed() == 0 && self.report.flushes_failed == 0 && self.report.lag_p99_s <= LAG_BOUND_S
    }
}

struct Args {
    answers: Vec<usize>,
    write_ms: Vec<f64>,
    cadences: Vec<Cadence>,
    arrival: Arrival,
    backend: Backend,
    seed: u64,
    threads: usize,
    shards_to: Option<usize>,
    out: Option<String>,
    smoke: bool,
    /// `CHECKPOINT_SLOW_MS` of the adaptive cadence (its default otherwise).
    slow_ms: Option<u64>,
    /// A hand-picked fixed interval for every stream (the characters scaled alike), with patient
    /// retries: what a cadence tuned by hand for one load would do, beside the adaptive one.
    fixed_interval_ms: Option<u64>,
    /// Print each run's timeline (every 5 s: answers streaming, stretch, lag, queue, writes/s).
    timeline: bool,
}

fn list<T: std::str::FromStr>(raw: &str) -> Vec<T> {
    raw.split(',').map(|v| v.trim().parse().unwrap_or_else(|_| usage(&format!("bad value {v:?}")))).collect()
}

fn usage(why: &str) -> ! {
    eprintln!(
        "{why}\nusage: dbload [--smoke] [--answers N,..] [--write-ms MS,..] [--cadence fixed,adaptive] [--arrival wave|steady] \
         [--backend sqlite|postgres] [--seed S] [--threads N] [--shards-to N|0] [--out PATH_WITHOUT_EXTENSION] [--timeline] \
         [--slow-ms MS] [--interval-ms MS]"
    );
    std::process::exit(2)
}

fn parse() -> Args {
    let mut args = Args {
        answers: vec![10, 50, 100, 150, 200, 250, 300, 400, 500, 750, 1000, 1250, 1500, 2000],
        write_ms: vec![2.0, 4.0, 8.0],
        cadences: vec![Cadence::Fixed, Cadence::Adaptive],
        arrival: Arrival::Wave { ramp_ms: 20_000 },
        backend: Backend::Sqlite,
        seed: 1,
        threads: 2,
        shards_to: Some(10_000),
        out: None,
        smoke: false,
        timeline: false,
        slow_ms: None,
        fixed_interval_ms: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| usage(&format!("{flag} needs a value")));
        match flag.as_str() {
            "--smoke" => args.smoke = true,
            "--timeline" => args.timeline = true,
            "--slow-ms" => args.slow_ms = Some(list(&value())[0]),
            "--interval-ms" => args.fixed_interval_ms = Some(list(&value())[0]),
            "--answers" => args.answers = list(&value()),
            "--write-ms" => args.write_ms = list(&value()),
            "--cadence" => {
                args.cadences = value()
                    .split(',')
                    .map(|c| match c {
                        "fixed" => Cadence::Fixed,
                        "adaptive" => Cadence::Adaptive,
                        other => usage(&format!("cadence {other:?}")),
                    })
                    .collect()
            }
            "--arrival" => {
                args.arrival = match value().as_str() {
                    "wave" => Arrival::Wave { ramp_ms: 20_000 },
                    "steady" => Arrival::Steady { for_ms: 120_000 },
                    other => usage(&format!("arrival {other:?}")),
                }
            }
            "--backend" => {
                args.backend = match value().as_str() {
                    "sqlite" => Backend::Sqlite,
                    "postgres" => Backend::Postgres,
                    other => usage(&format!("backend {other:?}")),
                }
            }
            "--seed" => args.seed = list(&value())[0],
            "--threads" => args.threads = list::<usize>(&value())[0].max(1),
            "--shards-to" => args.shards_to = Some(list(&value())[0]).filter(|&n| n > 0),
            "--out" => args.out = Some(value()),
            other => usage(&format!("unknown argument {other:?}")),
        }
    }
    if args.smoke {
        (args.answers, args.write_ms, args.shards_to) = (vec![5, 40], vec![4.0], None);
    }
    args
}

/// A database for one shard of a run.
fn shard(backend: Backend, capacity: Capacity, name: &str) -> Shard {
    match backend {
        Backend::Sqlite => Shard::new(support::SqliteDb::new(), capacity),
        Backend::Postgres => {
            let db = support::pg::PgDb::new(name).unwrap_or_else(|| usage("--backend postgres needs RINDLE_PG_URL"));
            Shard::new(db, capacity)
        }
    }
}

fn capacity(backend: Backend, write_ms: f64) -> Capacity {
    match backend {
        Backend::Sqlite => Capacity::d1(write_ms),
        // A pool of 10 connections (Hyperdrive's 10-20 per region), each transaction holding its
        // connection `write_ms`.
        Backend::Postgres => Capacity::hyperdrive(10, write_ms),
    }
}

fn run_point(args: &Args, write_ms: f64, cadence: Cadence, answers: usize, databases: usize) -> Point {
    let mut stream = cadence.stream();
    if let Some(slow) = args.slow_ms.filter(|_| cadence == Cadence::Adaptive) {
        stream.checkpoint_slow_ms = Millis(slow);
    }
    if let Some(ms) = args.fixed_interval_ms {
        stream.checkpoint_interval_ms = Millis(ms);
        stream.checkpoint_chars = rindle_streams::engine::text::utf16::Offset(512 * ms / 750);
        stream.checkpoint_max_stretch = 1;
    }
    let mut plan = Plan::curve(answers, write_ms, stream, args.seed);
    plan.capacity = capacity(args.backend, write_ms);
    plan.arrival = args.arrival;
    plan.databases = databases;
    if args.smoke {
        plan.answer_ms = (3_000, 6_000);
        plan.arrival = Arrival::Wave { ramp_ms: 1_000 };
    }
    let shards = (0..databases).map(|i| shard(args.backend, plan.capacity, &format!("dbload{i}"))).collect();
    let report = Fleet::new(plan, shards).run();
    Point { write_ms, cadence, seed: args.seed, report }
}

/// Runs `jobs` on `threads` threads (each builds its own databases), in order of the jobs.
fn run_all(args: &Args, jobs: Vec<(f64, Cadence, usize, usize)>) -> Vec<Point> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut points: Vec<(usize, Point)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = vec![];
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(&(write_ms, cadence, answers, databases)) = jobs.get(i) else { return done };
                        let started = std::time::Instant::now();
                        let point = run_point(args, write_ms, cadence, answers, databases);
                        eprintln!("{} ({:.0} s)", row(&point), started.elapsed().as_secs_f64());
                        if args.timeline {
                            for m in point.report.timeline.iter().step_by(8) {
                                eprintln!(
                                    "    t={:>5.0}s streaming {:>5} stretch {:>5.1} (p90 {:>5.1}) lag mean {:>5.2}s max {:>5.2}s queued {:>5} writes/s {:>4.0}",
                                    m.at_s, m.streaming, m.mean_stretch, m.p90_stretch, m.mean_lag_s, m.max_lag_s, m.queued, m.writes_per_s
                                );
                            }
                        }
                        done.push((i, point));
                    }
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a run panicked")).collect()
    });
    points.sort_by_key(|(i, _)| *i);
    points.into_iter().map(|(_, p)| p).collect()
}

fn header() -> String {
    format!(
        "{:>5} {:>6} {:>8} {:>4} {:>7} {:>7} {:>8} {:>8} {:>7} {:>7} {:>6} {:>6} {:>5} {:>5} {:>7}",
        "write",
        "answers",
        "cadence",
        "dbs",
        "lag50",
        "lag99",
        "flush99",
        "close99",
        "stmt/s",
        "util",
        "away",
        "failed",
        "left",
        "stretch",
        "ckpt/ans"
    )
}

fn row(p: &Point) -> String {
    let r = &p.report;
    format!(
        "{:>4}ms {:>6} {:>8} {:>4} {:>6.2}s {:>6.2}s {:>6.0}ms {:>6.0}ms {:>7.0} {:>6.0}% {:>6} {:>6} {:>5} {:>5.1}x {:>7.1}",
        p.write_ms,
        r.answers,
        format!("{:?}", p.cadence).to_lowercase(),
        r.databases,
        r.lag_p50_s,
        r.lag_p99_s,
        r.flush_p99_ms,
        r.close_p99_ms,
        r.statements_per_s,
        r.utilization * 100.0,
        r.turned_away,
        p.failed(),
        r.left_streaming,
        r.mean_stretch,
        r.checkpoints_per_answer,
    )
}

/// The most answers each (write time, cadence) carried with none failed and lag p99 within
/// the bound, below the first point that broke.
fn ceilings(points: &[Point]) -> Vec<(f64, Cadence, usize)> {
    let mut out = vec![];
    let mut keys: Vec<(f64, Cadence)> = points.iter().filter(|p| p.report.databases == 1).map(|p| (p.write_ms, p.cadence)).collect();
    keys.dedup();
    for (write_ms, cadence) in keys {
        let mut curve: Vec<&Point> =
            points.iter().filter(|p| p.write_ms == write_ms && p.cadence == cadence && p.report.databases == 1).collect();
        curve.sort_by_key(|p| p.report.answers);
        let ceiling = curve.iter().take_while(|p| p.holds()).last().map_or(0, |p| p.report.answers);
        out.push((write_ms, cadence, ceiling));
    }
    out
}

/// The plot: lag p99 and failed answers against answers at once, a line per write time and
/// cadence (dashed: today's fixed cadence), the 5 s bound drawn across.
fn svg(points: &[Point], title: &str) -> String {
    let curve: Vec<&Point> = points.iter().filter(|p| p.report.databases == 1).collect();
    let max_x = curve.iter().map(|p| p.report.answers).max().unwrap_or(1) as f64;
    let max_lag = curve.iter().map(|p| p.report.lag_p99_s).fold(LAG_BOUND_S * 2.0, f64::max).min(60.0);
    let (w, h, pad, gap) = (460.0, 300.0, 50.0, 40.0);
    let mut s = String::new();
    let width = 2.0 * (w + pad) + gap + pad;
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{}" font-family="sans-serif" font-size="12">"#,
        h + 2.0 * pad + 80.0
    );
    let _ = writeln!(s, r#"<rect width="100%" height="100%" fill="white"/><text x="{pad}" y="20" font-size="14">{title}</text>"#);
    let colors = |write_ms: f64| match write_ms as u32 {
        2 => "#1b9e77",
        4 => "#d95f02",
        8 => "#7570b3",
        _ => "#444",
    };
    type Measure = fn(&Point) -> f64;
    let panels: [(&str, f64, Measure); 2] = [
        ("checkpoint lag p99 (s)", max_lag, |p| p.report.lag_p99_s),
        ("answers failed, interrupted or left streaming (%)", 100.0, |p| 100.0 * p.failed() as f64 / p.report.answers.max(1) as f64),
    ];
    for (i, (label, max_y, value)) in panels.iter().enumerate() {
        let x0 = pad + i as f64 * (w + pad + gap);
        let y0 = pad + h;
        let x = |answers: f64| x0 + answers / max_x * w;
        let y = |v: f64| y0 - v.min(*max_y) / max_y * h;
        let _ = writeln!(s, r##"<rect x="{x0}" y="{pad}" width="{w}" height="{h}" fill="none" stroke="#999"/>"##);
        let _ = writeln!(s, r#"<text x="{x0}" y="{}">{label}</text>"#, pad - 8.0);
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">answers streaming at once, one database</text>"#,
            x0 + w / 2.0,
            y0 + 32.0
        );
        for k in 0..=4 {
            let (ax, ay) = (max_x * k as f64 / 4.0, max_y * k as f64 / 4.0);
            let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="middle">{:.0}</text>"#, x(ax), y0 + 16.0, ax);
            let _ = writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{:.1}</text>"#, x0 - 4.0, y(ay) + 4.0, ay);
        }
        if i == 0 {
            let _ = writeln!(
                s,
                r##"<line x1="{x0}" x2="{}" y1="{yb}" y2="{yb}" stroke="#c00" stroke-dasharray="2,3"/><text x="{}" y="{}" fill="#c00">{LAG_BOUND_S} s</text>"##,
                x0 + w,
                x0 + w - 30.0,
                y(LAG_BOUND_S) - 4.0,
                yb = y(LAG_BOUND_S)
            );
        }
        let mut keys: Vec<(f64, Cadence)> = curve.iter().map(|p| (p.write_ms, p.cadence)).collect();
        keys.dedup();
        for (write_ms, cadence) in keys {
            let mut line: Vec<&&Point> = curve.iter().filter(|p| p.write_ms == write_ms && p.cadence == cadence).collect();
            line.sort_by_key(|p| p.report.answers);
            let path: Vec<String> = line.iter().map(|p| format!("{:.1},{:.1}", x(p.report.answers as f64), y(value(p)))).collect();
            let dash = if cadence == Cadence::Fixed { r#" stroke-dasharray="6,4""# } else { "" };
            let _ =
                writeln!(s, r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#, path.join(" "), colors(write_ms));
            for p in &line {
                let _ = writeln!(
                    s,
                    r#"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="{}"/>"#,
                    x(p.report.answers as f64),
                    y(value(p)),
                    colors(write_ms)
                );
            }
        }
    }
    let (mut legend_x, mut legend_y) = (pad, h + 2.0 * pad + 20.0);
    let mut keys: Vec<(f64, Cadence)> = curve.iter().map(|p| (p.write_ms, p.cadence)).collect();
    keys.dedup();
    for (write_ms, cadence) in keys {
        let dash = if cadence == Cadence::Fixed { r#" stroke-dasharray="6,4""# } else { "" };
        let name = match cadence {
            Cadence::Fixed => "today's fixed cadence",
            Cadence::Adaptive => "adaptive",
        };
        let _ = writeln!(
            s,
            r#"<line x1="{legend_x}" x2="{}" y1="{legend_y}" y2="{legend_y}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{write_ms} ms a write, {name}</text>"#,
            legend_x + 24.0,
            colors(write_ms),
            legend_x + 28.0,
            legend_y + 4.0
        );
        legend_x += 300.0;
        if legend_x > width - 300.0 {
            (legend_x, legend_y) = (pad, legend_y + 18.0);
        }
    }
    s.push_str("</svg>\n");
    s
}

fn main() {
    let args = parse();
    let started = std::time::Instant::now();
    let mut jobs = vec![];
    for &write_ms in &args.write_ms {
        for &cadence in &args.cadences {
            for &answers in &args.answers {
                jobs.push((write_ms, cadence, answers, 1));
            }
        }
    }
    eprintln!("{}", header());
    let mut points = run_all(&args, jobs);
    let ceilings = ceilings(&points);
    if let Some(total) = args.shards_to {
        // Shards: each database at most the adaptive ceiling at 4 ms a write, the rest linear.
        let per_db = ceilings.iter().find(|(w, c, _)| *w == 4.0 && *c == Cadence::Adaptive).map_or(1000, |c| c.2).max(1);
        let databases = total.div_ceil(per_db);
        let steps: Vec<usize> = [total / 4, total / 2, total].into_iter().filter(|&n| n > 0).collect();
        let shard_jobs = steps.iter().map(|&n| (4.0, Cadence::Adaptive, n, n.div_ceil(per_db).min(databases))).collect();
        points.extend(run_all(&args, shard_jobs));
    }

    println!("{}", header());
    for p in &points {
        println!("{}", row(p));
    }
    println!();
    for (write_ms, cadence, ceiling) in &ceilings {
        println!(
            "ceiling at {write_ms} ms a write, {cadence:?} cadence: {ceiling} answers at once (none failed, lag p99 <= {LAG_BOUND_S} s)"
        );
    }
    let profile = if cfg!(debug_assertions) { "test profile" } else { "release" };
    println!("{} runs, seed {}, {:.0} s wall ({profile})", points.len(), args.seed, started.elapsed().as_secs_f64());

    if let Some(out) = &args.out {
        let json = serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "seed": args.seed,
            "arrival": format!("{:?}", args.arrival),
            "backend": format!("{:?}", args.backend),
            "ceilings": ceilings.iter().map(|(w, c, n)| serde_json::json!({"writeMs": w, "cadence": c, "answers": n})).collect::<Vec<_>>(),
            "points": points,
        });
        std::fs::write(format!("{out}.json"), serde_json::to_string_pretty(&json).unwrap() + "\n").expect("write the report");
        let database = match args.backend {
            Backend::Sqlite => "model of D1",
            Backend::Postgres => "model of PostgreSQL behind a pool of 10 connections",
        };
        let title = format!("One database under a wave of answers (30 tokens/s, 20-60 s each; {database}, seed {})", args.seed);
        std::fs::write(format!("{out}.svg"), svg(&points, &title)).expect("write the plot");
        println!("wrote {out}.json and {out}.svg");
    }
    if args.smoke {
        let broken: Vec<String> = points.iter().filter(|p| p.cadence == Cadence::Adaptive && !p.holds()).map(row).collect();
        assert!(broken.is_empty(), "the adaptive cadence failed an answer at smoke size:\n{}", broken.join("\n"));
    }
}
