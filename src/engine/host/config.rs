//! Settings: the live stream's policy and the service's configuration (SPEC §8), parsed from
//! the Worker's string vars and refused with a clear message when wrong.

use crate::engine::access::auth::JwtPolicy;
use crate::engine::access::cors::AllowedOrigins;
use crate::engine::durable::{ColumnNames, Databases, Dialect, MappingError, TableMapping};
use crate::engine::feed::FeedConfig;
use crate::engine::host::time::Millis;
use crate::engine::pump::{Build, PumpSecrets, PumpUpstreams, SecretsError, UpstreamsError};
use crate::engine::text::utf16::Offset;
use crate::engine::wire::ui::{Format, Validation};
use thiserror::Error;

/// How a checkpoint is confirmed and how a stream opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Mapped tables: the open probe and CAS, and a read-back after every checkpoint.
    Tables {
        /// A host column is mapped: the open write is a CAS and its read-back names the winner.
        host_cas: bool,
    },
    /// An app-supplied sink: it commits what it is given and may report the stored length.
    Sink,
}

/// The database the mapped tables live in (`DURABLE_BACKEND`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Cloudflare D1 (the `DB` binding): the default.
    #[default]
    D1,
    /// PostgreSQL through Hyperdrive (the `HYPERDRIVE` binding; docs/POSTGRES.md).
    Postgres,
}

impl Backend {
    fn parse(raw: &str) -> Option<Self> {
        match raw.trim() {
            "" | "d1" => Some(Backend::D1),
            "postgres" => Some(Backend::Postgres),
            _ => None,
        }
    }

    /// The binding of the backend's one database, without `DATABASES`.
    pub fn binding(self) -> &'static str {
        match self {
            Backend::D1 => "DB",
            Backend::Postgres => "HYPERDRIVE",
        }
    }

    /// The SQL dialect the backend speaks.
    pub fn dialect(self) -> Dialect {
        match self {
            Backend::D1 => Dialect::Sqlite,
            Backend::Postgres => Dialect::Postgres,
        }
    }

    /// A text a checkpoint could never store: PostgreSQL's `text` cannot hold U+0000 (every
    /// retry of it would fail whole, and the seal after it), SQLite's can. A producer's append
    /// holding one is refused (400 `bad_text`: the producer can fix it).
    pub fn refuses_text(self, text: &str) -> bool {
        self == Backend::Postgres && text.contains('\0')
    }

    /// `text` as the backend can store it: on PostgreSQL, each U+0000 replaced by U+FFFD (one
    /// UTF-16 unit for one, so no offset moves). For what no producer can be told to fix: a
    /// pump's text (the upstream sent it) and a stream's error message (`fail`'s, a pump's).
    pub fn storable(self, text: &str) -> std::borrow::Cow<'_, str> {
        if self.refuses_text(text) {
            std::borrow::Cow::Owned(text.replace('\0', "\u{FFFD}"))
        } else {
            std::borrow::Cow::Borrowed(text)
        }
    }
}

/// The text a stream with a custom sink keeps below `durableSeq` unless `RETAIN_CHARS` says
/// otherwise: the seed's 64K, enough for a reader whose view lags a checkpoint or two to join
/// without a `stale` round trip, while a long response does not stay in memory whole.
pub const SINK_RETAIN_CHARS: Offset = Offset(64 * 1024);

/// The default most readers per stream. Measured (bench/readers-memory.mjs, BENCHMARKS.md,
/// "Hostile traffic"): an attached reader costs workerd 80-110 KB of resident memory (107 KB
/// each for 500, 80 KB each for 1,000; of it, the wasm heap holds 0.2 KB: the rest is the
/// runtime's connection and response stream). 500 readers took 54 MB, under half the isolate's
/// 128 MB, leaving the rest to the stream's text and its replay.
pub const DEFAULT_MAX_READERS: usize = 500;

/// The default most bytes of a stream's text, counted as readers receive it: 4 MiB. Measured
/// (bench/readers-memory.mjs --together, docs/PERFORMANCE.md "Hostile traffic"): 100 readers joining
/// at 0 at once take the isolate (JavaScript heap, its buffers and the wasm memory) to 46 MB at
/// 4 MiB, 87 MB at 8 MiB and 186 MB at 16 MiB (about 11× the text, garbage not yet collected
/// included; 21, 38 and 71 MB once collected): 4 MiB stays well inside the isolate's 128 MB,
/// which other objects of the isolate share. It holds a `ui` answer of some 70,000 tokens.
pub const DEFAULT_MAX_STREAM_BYTES: usize = 4 << 20;

/// The live stream's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamConfig {
    /// A checkpoint of a `text` stream is due when this many UTF-16 units are not yet durable.
    pub checkpoint_chars: Offset,
    /// The same for a `ui` stream, whose NDJSON carries ~10× the characters of the answer it
    /// holds (a 4-character delta is a ~45-character `text-delta` line): with the `text`
    /// threshold, the same answer would take ~8× the checkpoint rounds and D1 rows.
    pub ui_checkpoint_chars: Offset,
    /// ... or this long after the oldest un-checkpointed change.
    pub checkpoint_interval_ms: Millis,
    /// A checkpoint round trip longer than this is the database's pressure, not the network's
    /// (`CHECKPOINT_SLOW_MS`): past it, both thresholds stretch (`live/pressure.rs`). A quiet
    /// database answers well within it, so the cadence stays as configured.
    pub checkpoint_slow_ms: Millis,
    /// How far the thresholds may stretch under pressure (`CHECKPOINT_MAX_STRETCH`): up to this
    /// many times the interval and the characters. 1 keeps the cadence fixed.
    pub checkpoint_max_stretch: u32,
    /// How long a store operation failing for load (the database overloaded, a call timed out)
    /// is retried, from its first failure, before its caller is told (`STORE_PATIENCE_MS`): a
    /// flush, a close or an open under load waits up to this much longer. 0: load is retried
    /// like any failure (`CHECKPOINT_RETRIES`, unjittered).
    pub store_patience_ms: Millis,
    /// Retries of one store operation after its first failure.
    pub retries: u32,
    /// The first retry's delay; each later one doubles.
    pub retry_backoff_ms: Millis,
    /// How long a sealed stream stays joinable.
    pub linger_ms: Millis,
    /// A live stream whose producer sends nothing (no append, flush) for this long is sealed
    /// `interrupted`, so an abandoned producer never leaves a row `streaming`. 0 disables it.
    pub idle_timeout_ms: Millis,
    /// A reader's queue bound; past it the reader gets `stale`.
    pub max_queued_frames: usize,
    /// The most readers attached to one stream at once (`MAX_READERS`); the next one is
    /// refused 429 until one leaves. Each holds a connection and a queue in the stream's object.
    pub max_readers: usize,
    /// The most bytes a stream's text may take as its readers receive it, a JSON string
    /// (`MAX_STREAM_BYTES`): a push past it is refused whole (413) and the stream seals `error`
    /// with the text it has.
    pub max_stream_bytes: usize,
    /// Merge the chunk frames queued for a reader that fell behind into one at pull time. Off
    /// only to measure what merging saves (`MERGE_QUEUED_CHUNKS=0`, see BENCHMARKS.md).
    pub merge_queued_chunks: bool,
    /// Reader pacing: with N readers, one reader is woken on average at most once per N × this
    /// many microseconds (at most `reader_pacing_max_ms`), so that with many readers each write
    /// carries several frames. 0 wakes every reader for every frame.
    pub reader_pacing_us: u64,
    pub reader_pacing_max_ms: Millis,
    /// Writes a reader may take in a row closer together than its pace (a token bucket), so
    /// that pacing holds back only a reader that is written more often than its pace on
    /// average, not two deltas that happen to arrive close together.
    pub reader_pacing_burst: u64,
    /// A reader that has been written nothing for this long gets a `: ping` comment (SPEC §3),
    /// so intermediaries do not reap an idle connection.
    pub keepalive_ms: Millis,
    /// Text kept below `durableSeq` (sink mode only); `None` keeps everything.
    pub retain_chars: Option<Offset>,
    /// The largest checkpoint slice, in UTF-8 bytes (well under D1's 2,000,000-byte rows).
    pub max_slice_bytes: usize,
    /// The largest body compacted into one row at seal; a larger one stays as chunk rows.
    pub max_compact_bytes: usize,
    /// The lease alarm's period (SPEC §7): armed before the row is marked, renewed every half
    /// lease while the stream is alive here.
    pub lease_ms: Millis,
    /// How long a rehydrated stream waits for its producer's resume before it seals
    /// `interrupted` (SPEC §10). 0 turns rehydration off: a reset seals `interrupted` at once.
    pub resume_window_ms: Millis,
    /// How long the shell waits for any store call (D1, a sink, the object's storage) before
    /// it counts the call as failed (`MayHaveCommitted`) and ignores a late reply
    /// (`STORE_TIMEOUT_MS`): a call that never answers must not keep a stream opening or
    /// sealing for ever.
    pub store_timeout_ms: Millis,
    pub mode: CheckpointMode,
    /// What the stream's text is (SPEC §9): chosen by the open request, not a var.
    pub format: Format,
    /// How a `ui` stream's lines are checked (`UI_VALIDATION`): as the AI SDK's schema does, by
    /// default.
    pub ui_validation: Validation,
}

impl Default for StreamConfig {
    fn default() -> Self {
        Self {
            checkpoint_chars: Offset(512),
            ui_checkpoint_chars: Offset(4096),
            checkpoint_interval_ms: Millis(750),
            checkpoint_slow_ms: Millis(250),
            checkpoint_max_stretch: 16,
            store_patience_ms: Millis(30_000),
            retries: 3,
            retry_backoff_ms: Millis(50),
            linger_ms: Millis(30_000),
            idle_timeout_ms: Millis(300_000),
            max_queued_frames: 1024,
            max_readers: DEFAULT_MAX_READERS,
            max_stream_bytes: DEFAULT_MAX_STREAM_BYTES,
            merge_queued_chunks: true,
            reader_pacing_us: 500,
            reader_pacing_max_ms: Millis(50),
            reader_pacing_burst: 4,
            keepalive_ms: Millis(15_000),
            retain_chars: None,
            max_slice_bytes: 256 * 1024,
            max_compact_bytes: 1_900_000,
            lease_ms: Millis(10_000),
            resume_window_ms: Millis(30_000),
            store_timeout_ms: Millis(15_000),
            mode: CheckpointMode::Tables { host_cas: true },
            format: Format::Text,
            ui_validation: Validation::Strict,
        }
    }
}

impl StreamConfig {
    /// Whether one more reader may join a stream that has `readers` attached (`MAX_READERS`).
    pub fn admits_reader(&self, readers: usize) -> bool {
        readers < self.max_readers
    }

    /// The delay before retry number `retry` (1-based), or `None` when retries are exhausted.
    pub fn retry_delay(&self, retry: u32) -> Option<Millis> {
        (retry >= 1 && retry <= self.retries).then(|| self.retry_backoff_ms * (1 << (retry - 1).min(20)))
    }

    /// How many UTF-16 units may be not yet durable before a checkpoint is due, for this
    /// stream's format.
    pub fn checkpoint_due_chars(&self) -> Offset {
        match self.format {
            Format::Text => self.checkpoint_chars,
            Format::Ui => self.ui_checkpoint_chars,
        }
    }

    /// Whether a seal leaves the text as chunk rows and writes only the row's status, instead
    /// of compacting the body into the row: mapped tables only, when the text here does not
    /// start at 0 or is too large for one row. The one rule for the stream's own seal and the
    /// lease's.
    pub fn seals_in_place(&self, floor: Offset, body_bytes: usize) -> bool {
        matches!(self.mode, CheckpointMode::Tables { .. }) && (floor > Offset::ZERO || body_bytes > self.max_compact_bytes)
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.checkpoint_chars == Offset::ZERO {
            return Err(ConfigError::invalid("CHECKPOINT_CHARS", "must be at least 1"));
        }
        if self.ui_checkpoint_chars == Offset::ZERO {
            return Err(ConfigError::invalid("UI_CHECKPOINT_CHARS", "must be at least 1"));
        }
        if self.checkpoint_interval_ms == Millis::ZERO {
            return Err(ConfigError::invalid("CHECKPOINT_INTERVAL_MS", "must be at least 1"));
        }
        if self.retries > 10 {
            return Err(ConfigError::invalid("CHECKPOINT_RETRIES", "must be at most 10"));
        }
        if self.max_queued_frames < 4 {
            return Err(ConfigError::invalid("MAX_QUEUED_FRAMES", "must be at least 4"));
        }
        if self.retain_chars.is_some() && matches!(self.mode, CheckpointMode::Tables { .. }) {
            return Err(ConfigError::invalid(
                "RETAIN_CHARS",
                "is honoured only with a custom checkpoint sink: mapped tables keep the whole text for compaction",
            ));
        }
        if self.max_slice_bytes == 0 || self.max_slice_bytes > 1_000_000 {
            return Err(ConfigError::invalid("max_slice_bytes", "must be between 1 and 1,000,000"));
        }
        Ok(())
    }
}

/// A configuration the service refuses to start with.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConfigError {
    #[error("configuration {name}: {reason}")]
    Invalid { name: &'static str, reason: String },
    #[error("configuration COLUMNS/MESSAGE_TABLE/CHUNK_TABLE: {0}")]
    Mapping(#[from] MappingError),
    #[error("configuration PUMP_SECRETS: {0}")]
    PumpSecrets(#[from] SecretsError),
    #[error("configuration PUMP_UPSTREAMS: {0}")]
    PumpUpstreams(#[from] UpstreamsError),
}

impl ConfigError {
    fn invalid(name: &'static str, reason: impl Into<String>) -> Self {
        ConfigError::Invalid { name, reason: reason.into() }
    }
}

/// Everything the service is configured with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub stream: StreamConfig,
    pub path_prefix: String,
    pub sse_retry_ms: Millis,
    pub max_append_bytes: usize,
    pub mapping: TableMapping,
    /// Where the mapped tables live (`DURABLE_BACKEND`: `d1` or `postgres`).
    pub backend: Backend,
    /// The databases, and which one an answer lives in (`DATABASES`; SPEC §13,
    /// `durable/databases.rs`).
    pub databases: Databases,
    /// The upstreams a pump may fetch (`PUMP_UPSTREAMS`).
    pub pump_upstreams: PumpUpstreams,
    /// The secrets a pump request may name as its credential (`PUMP_SECRETS`), each set and
    /// pinned within the upstreams.
    pub pump_secrets: PumpSecrets,
    /// The page origins that may call the API from a browser (`ALLOWED_ORIGINS`; none: only
    /// the Worker's own origin).
    pub allowed_origins: AllowedOrigins,
    /// The chat feeds' history and lifetime (`FEED_HISTORY`, `FEED_IDLE_MS`; SPEC §11).
    pub feed: FeedConfig,
    /// What the JWT check requires beyond a signature (`STREAM_JWT_AUDIENCE`,
    /// `STREAM_JWT_MAX_LIFETIME_SECS`).
    pub jwt: JwtPolicy,
}

impl Settings {
    /// Parses the Worker's vars; `var(name)` returns a var's value if set. Unset vars take
    /// their defaults; a set but malformed var is an error, never ignored. `custom_sink` says
    /// an embedding Worker supplies its own checkpoint sink (the mode where `RETAIN_CHARS` is
    /// honoured); `build` which build reads them (the pump's defaults differ).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>, custom_sink: bool, build: Build) -> Result<Self, ConfigError> {
        let defaults = StreamConfig::default();
        let number = |name: &'static str, default: u64, min: u64, max: u64| -> Result<u64, ConfigError> {
            match var(name) {
                None => Ok(default),
                Some(raw) => match raw.trim().parse::<u64>() {
                    Ok(n) if (min..=max).contains(&n) => Ok(n),
                    _ => Err(ConfigError::invalid(name, format!("{raw:?} is not an integer between {min} and {max}"))),
                },
            }
        };
        let names = match var("COLUMNS") {
            Some(json) if !json.trim().is_empty() => ColumnNames::from_json(&json)?,
            _ => ColumnNames::default(),
        };
        let mapping = TableMapping::new(
            &var("MESSAGE_TABLE").unwrap_or_else(|| "messages".into()),
            &var("CHUNK_TABLE").unwrap_or_else(|| "message_chunks".into()),
            &names,
        )?;
        // The vars are where offsets and times come in: typed here, once.
        let chars = |name, default: Offset, min, max| number(name, default.0, min, max).map(Offset);
        let ms = |name, default: Millis, min, max| number(name, default.0, min, max).map(Millis);
        let retain_chars = match var("RETAIN_CHARS") {
            Some(raw) if !raw.trim().is_empty() => Some(chars("RETAIN_CHARS", Offset::ZERO, 0, u64::from(u32::MAX))?),
            _ if custom_sink => Some(SINK_RETAIN_CHARS),
            _ => None,
        };
        let stream = StreamConfig {
            checkpoint_chars: chars("CHECKPOINT_CHARS", defaults.checkpoint_chars, 1, 1 << 20)?,
            ui_checkpoint_chars: chars("UI_CHECKPOINT_CHARS", defaults.ui_checkpoint_chars, 1, 1 << 20)?,
            checkpoint_interval_ms: ms("CHECKPOINT_INTERVAL_MS", defaults.checkpoint_interval_ms, 1, 600_000)?,
            checkpoint_slow_ms: ms("CHECKPOINT_SLOW_MS", defaults.checkpoint_slow_ms, 1, 60_000)?,
            checkpoint_max_stretch: number("CHECKPOINT_MAX_STRETCH", u64::from(defaults.checkpoint_max_stretch), 1, 64)? as u32,
            store_patience_ms: ms("STORE_PATIENCE_MS", defaults.store_patience_ms, 0, 600_000)?,
            retries: number("CHECKPOINT_RETRIES", u64::from(defaults.retries), 0, 10)? as u32,
            linger_ms: ms("LINGER_MS", defaults.linger_ms, 0, 3_600_000)?,
            idle_timeout_ms: ms("IDLE_TIMEOUT_MS", defaults.idle_timeout_ms, 0, 86_400_000)?,
            max_queued_frames: number("MAX_QUEUED_FRAMES", defaults.max_queued_frames as u64, 4, 1 << 20)? as usize,
            max_readers: number("MAX_READERS", defaults.max_readers as u64, 1, 100_000)? as usize,
            max_stream_bytes: number("MAX_STREAM_BYTES", defaults.max_stream_bytes as u64, 1024, 64 << 20)? as usize,
            merge_queued_chunks: number("MERGE_QUEUED_CHUNKS", 1, 0, 1)? == 1,
            reader_pacing_us: number("READER_PACING_US", defaults.reader_pacing_us, 0, 10_000)?,
            reader_pacing_burst: number("READER_PACING_BURST", defaults.reader_pacing_burst, 1, 64)?,
            lease_ms: ms("LEASE_MS", defaults.lease_ms, 1000, 3_600_000)?,
            resume_window_ms: ms("RESUME_WINDOW_MS", defaults.resume_window_ms, 0, 3_600_000)?,
            store_timeout_ms: ms("STORE_TIMEOUT_MS", defaults.store_timeout_ms, 100, 600_000)?,
            keepalive_ms: ms("KEEPALIVE_MS", defaults.keepalive_ms, 100, 600_000)?,
            retain_chars,
            mode: if custom_sink { CheckpointMode::Sink } else { CheckpointMode::Tables { host_cas: mapping.host.is_some() } },
            ui_validation: match var("UI_VALIDATION") {
                None => defaults.ui_validation,
                Some(raw) => Validation::parse(raw.trim())
                    .ok_or_else(|| ConfigError::invalid("UI_VALIDATION", format!("{raw:?} must be \"strict\" or \"lenient\"")))?,
            },
            ..defaults
        };
        stream.validate()?;
        let lease_ms = stream.lease_ms;
        let path_prefix = var("PATH_PREFIX").unwrap_or_else(|| "/streams".into());
        if !path_prefix.starts_with('/') || path_prefix.ends_with('/') || path_prefix.contains("//") {
            return Err(ConfigError::invalid("PATH_PREFIX", format!("{path_prefix:?} must start with '/' and not end with '/'")));
        }
        let pump_upstreams = PumpUpstreams::parse(&var("PUMP_UPSTREAMS").unwrap_or_default(), build)?;
        let pump_secrets = PumpSecrets::parse(&var("PUMP_SECRETS").unwrap_or_default())?;
        pump_secrets.check(&pump_upstreams, build)?;
        if let Some(unset) = pump_secrets.names().find(|name| var(name).is_none()) {
            return Err(ConfigError::invalid(
                "PUMP_SECRETS",
                format!("names {unset}, which is not set (a secret: `wrangler secret put {unset}`, or .dev.vars locally)"),
            ));
        }
        let backend = match var("DURABLE_BACKEND") {
            None => Backend::D1,
            Some(raw) => Backend::parse(&raw)
                .ok_or_else(|| ConfigError::invalid("DURABLE_BACKEND", format!("{raw:?} must be \"d1\" or \"postgres\"")))?,
        };
        mapping.check_for(backend.dialect())?;
        let databases = match var("DATABASES").filter(|raw| !raw.trim().is_empty()) {
            None => Databases::single(backend.binding()),
            Some(raw) => Databases::parse(&raw).map_err(|e| ConfigError::invalid("DATABASES", e.to_string()))?,
        };
        Ok(Settings {
            stream,
            path_prefix,
            sse_retry_ms: ms("SSE_RETRY_MS", Millis(1000), 0, 600_000)?,
            max_append_bytes: number("MAX_APPEND_BYTES", 1 << 20, 1, 64 << 20)? as usize,
            mapping,
            backend,
            databases,
            pump_upstreams,
            pump_secrets,
            allowed_origins: AllowedOrigins::parse(var("ALLOWED_ORIGINS").as_deref().unwrap_or(""))
                .map_err(|e| ConfigError::invalid("ALLOWED_ORIGINS", e.to_string()))?,
            feed: FeedConfig {
                history_events: number("FEED_HISTORY", FeedConfig::default().history_events as u64, 3, 1000)? as usize,
                idle_ms: ms("FEED_IDLE_MS", FeedConfig::default().idle_ms, 1000, 7 * 86_400_000)?,
                // A stream whose object was lost is sealed within a lease (SPEC §7): its row is
                // read back a few leases after the feed last heard of it.
                verify_ms: lease_ms * 3,
                // A tab waiting on a sleeping feed costs its object nothing but a socket (the
                // runtime takes 32,768 hibernatable sockets per object).
                max_readers: number("FEED_MAX_READERS", FeedConfig::default().max_readers as u64, 1, 32_768)? as usize,
                ..FeedConfig::default()
            },
            jwt: JwtPolicy {
                audience: var("STREAM_JWT_AUDIENCE").map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()),
                // A minute at least (a token must outlive its way here), a year at most.
                max_lifetime_secs: number(
                    "STREAM_JWT_MAX_LIFETIME_SECS",
                    crate::engine::access::auth::DEFAULT_MAX_LIFETIME_SECS,
                    60,
                    31_536_000,
                )?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn settings(vars: &[(&str, &str)]) -> Result<Settings, ConfigError> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Settings::from_vars(|k| map.get(k).cloned(), false, Build::Production)
    }

    #[test]
    fn defaults_follow_the_spec() {
        let s = settings(&[]).unwrap();
        assert_eq!(s.stream.checkpoint_chars, Offset(512));
        assert_eq!(s.stream.ui_checkpoint_chars, Offset(4096));
        assert_eq!(s.stream.checkpoint_interval_ms, Millis(750));
        assert_eq!(s.stream.retries, 3);
        assert_eq!(s.stream.linger_ms, Millis(30_000));
        assert_eq!(s.stream.max_queued_frames, 1024);
        assert_eq!(s.stream.keepalive_ms, Millis(15_000));
        assert_eq!(s.stream.store_timeout_ms, Millis(15_000));
        assert_eq!(s.sse_retry_ms, Millis(1000));
        assert_eq!(s.path_prefix, "/streams");
        assert_eq!(s.stream.resume_window_ms, Millis(30_000), "SPEC §10");
        assert_eq!(
            (s.stream.checkpoint_slow_ms, s.stream.checkpoint_max_stretch, s.stream.store_patience_ms),
            (Millis(250), 16, Millis(30_000)),
            "SPEC §13"
        );
        assert_eq!(settings(&[("RESUME_WINDOW_MS", "0")]).unwrap().stream.resume_window_ms, Millis::ZERO, "0 turns rehydration off");
    }

    #[test]
    fn the_feed_keeps_96_events_for_10_minutes_idle_unless_told_otherwise() {
        let s = settings(&[]).unwrap();
        assert_eq!((s.feed.history_events, s.feed.idle_ms, s.feed.verify_ms), (96, Millis(600_000), Millis(30_000)));
        let s = settings(&[("FEED_HISTORY", "9"), ("FEED_IDLE_MS", "5000"), ("LEASE_MS", "2000")]).unwrap();
        assert_eq!((s.feed.history_events, s.feed.idle_ms, s.feed.verify_ms), (9, Millis(5000), Millis(6000)));
        assert!(settings(&[("FEED_HISTORY", "2")]).unwrap_err().to_string().contains("FEED_HISTORY"));
        assert!(settings(&[("FEED_IDLE_MS", "10")]).unwrap_err().to_string().contains("FEED_IDLE_MS"));
    }

    #[test]
    fn a_stream_admits_readers_up_to_max_readers() {
        let s = settings(&[("MAX_READERS", "2")]).unwrap().stream;
        assert!(s.admits_reader(0) && s.admits_reader(1) && !s.admits_reader(2) && !s.admits_reader(3));
        assert_eq!(settings(&[]).unwrap().stream.max_readers, DEFAULT_MAX_READERS);
        assert!(settings(&[("MAX_READERS", "0")]).unwrap_err().to_string().starts_with("configuration MAX_READERS: "));
    }

    #[test]
    fn the_durable_backend_is_d1_or_postgres_and_nothing_else() {
        assert_eq!(settings(&[]).unwrap().backend, Backend::D1);
        assert_eq!(settings(&[("DURABLE_BACKEND", "d1")]).unwrap().backend, Backend::D1);
        assert_eq!(settings(&[("DURABLE_BACKEND", "postgres")]).unwrap().backend, Backend::Postgres);
        let err = settings(&[("DURABLE_BACKEND", "mysql")]).unwrap_err().to_string();
        assert_eq!(err, r#"configuration DURABLE_BACKEND: "mysql" must be "d1" or "postgres""#);
        assert!(Backend::Postgres.refuses_text("a\0b") && !Backend::D1.refuses_text("a\0b") && !Backend::Postgres.refuses_text("ab"));
        assert_eq!(Backend::Postgres.storable("a\0b\0"), "a\u{FFFD}b\u{FFFD}");
        assert_eq!(Backend::D1.storable("a\0b"), "a\0b");
        let err = settings(&[("DURABLE_BACKEND", "postgres"), ("CHUNK_TABLE", &"c".repeat(64))]).unwrap_err().to_string();
        assert!(err.starts_with("configuration COLUMNS/MESSAGE_TABLE/CHUNK_TABLE: invalid table/column name"), "{err}");
        assert!(settings(&[("CHUNK_TABLE", &"c".repeat(64))]).is_ok(), "D1 keeps it whole");
    }

    #[test]
    fn malformed_vars_are_refused_by_name() {
        let err = settings(&[("CHECKPOINT_CHARS", "lots")]).unwrap_err().to_string();
        assert!(err.contains("CHECKPOINT_CHARS"), "{err}");
        let err = settings(&[("RESUME_WINDOW_MS", "-1")]).unwrap_err().to_string();
        assert!(err.contains("RESUME_WINDOW_MS"), "{err}");
        assert!(settings(&[("PATH_PREFIX", "streams")]).is_err());
        assert!(settings(&[("COLUMNS", r#"{"body":"a\"b"}"#)]).is_err());
        assert!(settings(&[("COLUMNS", "not json")]).is_err());
    }

    #[test]
    fn one_database_unless_databases_names_several_and_a_bad_one_is_refused_by_name() {
        let one = settings(&[]).unwrap().databases;
        assert_eq!(one.of_id("eu:m1").map(|d| d.binding), Ok("DB"));
        let pg = settings(&[("DURABLE_BACKEND", "postgres")]).unwrap().databases;
        assert_eq!(pg.of_id("m1").map(|d| d.binding), Ok("HYPERDRIVE"));
        let many = settings(&[("DATABASES", r#"{"default": "DB", "eu": "DB_EU"}"#)]).unwrap().databases;
        assert_eq!(many.of_id("eu:m1").map(|d| d.binding), Ok("DB_EU"));
        let err = settings(&[("DATABASES", "nope")]).unwrap_err().to_string();
        assert!(err.starts_with("configuration DATABASES: is not a JSON object"), "{err}");
    }

    #[test]
    fn the_cadence_under_load_is_tunable_and_refused_out_of_range() {
        let s = settings(&[("CHECKPOINT_SLOW_MS", "400"), ("CHECKPOINT_MAX_STRETCH", "1"), ("STORE_PATIENCE_MS", "0")]).unwrap();
        assert_eq!((s.stream.checkpoint_slow_ms, s.stream.checkpoint_max_stretch, s.stream.store_patience_ms), (Millis(400), 1, Millis(0)));
        for (name, bad) in
            [("CHECKPOINT_SLOW_MS", "0"), ("CHECKPOINT_MAX_STRETCH", "0"), ("CHECKPOINT_MAX_STRETCH", "65"), ("STORE_PATIENCE_MS", "x")]
        {
            let err = settings(&[(name, bad)]).unwrap_err().to_string();
            assert!(err.starts_with(&format!("configuration {name}: ")), "{err}");
        }
    }

    #[test]
    fn ui_validation_is_strict_unless_set_lenient_and_anything_else_is_refused() {
        assert_eq!(settings(&[]).unwrap().stream.ui_validation, Validation::Strict);
        assert_eq!(settings(&[("UI_VALIDATION", "lenient")]).unwrap().stream.ui_validation, Validation::Lenient);
        let err = settings(&[("UI_VALIDATION", "loose")]).unwrap_err().to_string();
        assert_eq!(err, r#"configuration UI_VALIDATION: "loose" must be "strict" or "lenient""#);
    }

    #[test]
    fn allowed_origins_are_none_by_default_and_a_bad_entry_is_refused_by_name() {
        assert!(settings(&[]).unwrap().allowed_origins.is_empty());
        let err = settings(&[("ALLOWED_ORIGINS", "https://app.example.com/")]).unwrap_err().to_string();
        assert!(err.starts_with("configuration ALLOWED_ORIGINS: "), "{err}");
    }

    #[test]
    fn the_jwt_policy_checks_no_audience_and_a_day_of_lifetime_unless_set() {
        assert_eq!(settings(&[]).unwrap().jwt, JwtPolicy { audience: None, max_lifetime_secs: 86_400 });
        let set = settings(&[("STREAM_JWT_AUDIENCE", " rindle "), ("STREAM_JWT_MAX_LIFETIME_SECS", "3600")]).unwrap();
        assert_eq!(set.jwt, JwtPolicy { audience: Some("rindle".into()), max_lifetime_secs: 3600 });
        assert_eq!(settings(&[("STREAM_JWT_AUDIENCE", "")]).unwrap().jwt.audience, None);
        for bad in ["0", "59", "31536001", "a day"] {
            let err = settings(&[("STREAM_JWT_MAX_LIFETIME_SECS", bad)]).unwrap_err().to_string();
            assert!(err.starts_with("configuration STREAM_JWT_MAX_LIFETIME_SECS: "), "{err}");
        }
    }

    #[test]
    fn retain_chars_is_refused_in_tables_mode() {
        let err = settings(&[("RETAIN_CHARS", "100")]).unwrap_err().to_string();
        assert!(err.contains("RETAIN_CHARS"), "{err}");
        let with_sink = Settings::from_vars(|k| (k == "RETAIN_CHARS").then(|| "100".to_owned()), true, Build::Production).unwrap();
        assert_eq!(with_sink.stream.retain_chars, Some(Offset(100)));
    }

    #[test]
    fn retain_chars_defaults_to_the_seeds_64k_with_a_custom_sink_and_to_everything_with_tables() {
        assert_eq!(Settings::from_vars(|_| None, true, Build::Production).unwrap().stream.retain_chars, Some(Offset(65_536)));
        assert_eq!(settings(&[]).unwrap().stream.retain_chars, None, "compaction needs the whole text");
    }

    #[test]
    fn the_retry_schedule_is_three_retries_doubling_from_50ms() {
        let c = StreamConfig::default();
        let delays: Vec<_> = (1..=4).map(|n| c.retry_delay(n)).collect();
        assert_eq!(delays, vec![Some(Millis(50)), Some(Millis(100)), Some(Millis(200)), None]);
    }

    #[test]
    fn pumps_are_off_in_production_unless_upstreams_are_listed() {
        assert_eq!(settings(&[]).unwrap().pump_upstreams, PumpUpstreams::None);
        let dev = Settings::from_vars(|_| None, false, Build::Development).unwrap();
        assert_eq!(dev.pump_upstreams, PumpUpstreams::Loopback);
        let listed = settings(&[("PUMP_UPSTREAMS", "https://api.openai.com/v1/")]).unwrap();
        assert!(listed.pump_upstreams.permit("https://api.openai.com/v1/responses").is_ok());
        let err = settings(&[("PUMP_UPSTREAMS", "api.openai.com")]).unwrap_err().to_string();
        assert!(err.starts_with("configuration PUMP_UPSTREAMS: entry \"api.openai.com\""), "{err}");
    }

    #[test]
    fn pump_secrets_are_an_allow_list_of_set_secrets_pinned_within_the_upstreams() {
        assert_eq!(settings(&[]).unwrap().pump_secrets, PumpSecrets::default());
        let openai = [("PUMP_UPSTREAMS", "https://api.openai.com/v1/"), ("OPENAI_API_KEY", "sk-x")];
        let s = settings(&[("PUMP_SECRETS", "OPENAI_API_KEY=https://api.openai.com/v1/"), openai[0], openai[1]]).unwrap();
        assert_eq!(s.pump_secrets.names().collect::<Vec<_>>(), ["OPENAI_API_KEY"]);
        assert!(matches!(
            settings(&[("PUMP_SECRETS", "OPENAI_API_KEY"), openai[0], openai[1]]),
            Err(ConfigError::PumpSecrets(SecretsError::Unpinned(_)))
        ));
        assert!(matches!(
            settings(&[("PUMP_SECRETS", "OPENAI_API_KEY=https://api.openai.com"), openai[0], openai[1]]),
            Err(ConfigError::PumpSecrets(SecretsError::PinNotAllowed { .. }))
        ));
        let unset = settings(&[("PUMP_SECRETS", "OPENAI_API_KEY=https://api.openai.com/v1/"), openai[0]]).unwrap_err();
        assert_eq!(
            unset.to_string(),
            "configuration PUMP_SECRETS: names OPENAI_API_KEY, which is not set (a secret: `wrangler secret put OPENAI_API_KEY`, or .dev.vars locally)"
        );
        assert!(matches!(settings(&[("PUMP_SECRETS", "STREAM_JWT_SECRET")]), Err(ConfigError::PumpSecrets(SecretsError::Reserved))));
        assert!(matches!(settings(&[("PUMP_SECRETS", "KEY=ftp://x")]), Err(ConfigError::PumpSecrets(SecretsError::Malformed(_)))));
    }
}
