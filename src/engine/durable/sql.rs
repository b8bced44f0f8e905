//! Every statement the durable plane runs, as SQL text plus bound parameters.
//!
//! Values are always bound, never spliced into the text; identifiers come from a validated
//! [`TableMapping`] and are double-quoted. The D1/SQLite dialect is the one deployed; the
//! Postgres dialect differs in placeholders, column types and the checkpoint's statement (see
//! [`MappedSql::append`]), and runs on a real server in `tests/sql_postgres.rs`.

use super::mapping::{Ident, TableMapping};
use crate::engine::host::store::RowGuard;
use crate::engine::text::utf16::Offset;
use crate::engine::wire::frame::{EndStatus, STATUS_STREAMING};
use crate::engine::wire::ui::Format;

/// The SQL dialect of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite, as D1 speaks it: `?N` placeholders.
    Sqlite,
    /// PostgreSQL: `$N` placeholders, `bigint`, `boolean`.
    Postgres,
}

impl Dialect {
    /// The `n`th parameter's placeholder (from 1).
    pub fn placeholder(self, n: usize) -> String {
        match self {
            Dialect::Sqlite => format!("?{n}"),
            Dialect::Postgres => format!("${n}"),
        }
    }

    fn text_type(self) -> &'static str {
        match self {
            Dialect::Sqlite => "TEXT",
            Dialect::Postgres => "text",
        }
    }

    fn int_type(self) -> &'static str {
        match self {
            Dialect::Sqlite => "INTEGER",
            Dialect::Postgres => "bigint",
        }
    }

    /// The longest identifier the database keeps whole: PostgreSQL truncates a longer one to
    /// 63 bytes (`NAMEDATALEN - 1`) without an error, so two mapped names could become one;
    /// SQLite has no limit of its own.
    pub fn max_identifier_bytes(self) -> usize {
        match self {
            Dialect::Sqlite => super::mapping::MAX_IDENTIFIER_BYTES,
            Dialect::Postgres => 63,
        }
    }
}

/// A bound parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Text(String),
    Int(i64),
    Bool(bool),
    Null,
}

impl Value {
    /// The bytes this value puts into a statement: text as UTF-8, a number or flag as 8.
    pub fn bound_bytes(&self) -> usize {
        match self {
            Value::Text(s) => s.len(),
            Value::Int(_) | Value::Bool(_) => 8,
            Value::Null => 0,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::Text(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::Text(s)
    }
}

/// An offset is bound as its number.
impl From<Offset> for Value {
    fn from(offset: Offset) -> Self {
        // Offsets are bounded by MAX_OFFSET (2^53), far inside i64.
        Value::Int(i64::try_from(offset.0).expect("offsets fit in i64"))
    }
}

impl From<Option<&str>> for Value {
    fn from(s: Option<&str>) -> Self {
        s.map_or(Value::Null, Value::from)
    }
}

/// One statement with its parameters, numbered from 1 in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    pub sql: String,
    pub params: Vec<Value>,
}

/// The most answers a feed's check names in one statement (D1 binds at most 100 values).
pub const MAX_CHECKED_ANSWERS: usize = 32;

/// The deterministic id of a chunk row: a replayed checkpoint collides with itself and is
/// absorbed by `ON CONFLICT DO NOTHING`, so retries need no dedup ledger.
pub fn chunk_id(stream_id: &str, seq: Offset) -> String {
    format!("{stream_id}:{seq}")
}

/// Builds the plane's statements for one mapping and dialect.
#[derive(Debug, Clone)]
pub struct MappedSql {
    map: TableMapping,
    dialect: Dialect,
}

impl MappedSql {
    pub fn new(map: TableMapping, dialect: Dialect) -> Self {
        Self { map, dialect }
    }

    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// A host column is mapped (the open's CAS, and the lease's proof of ownership).
    pub fn has_host_column(&self) -> bool {
        self.map.host.is_some()
    }

    /// A format column is mapped (the open writes the stream's format into the row).
    pub fn has_format_column(&self) -> bool {
        self.map.format.is_some()
    }

    fn p(&self, n: usize) -> String {
        self.dialect.placeholder(n)
    }

    /// The chunk table's DDL, one statement per entry, for the app's migration.
    pub fn chunk_table_ddl(&self) -> Vec<String> {
        let m = &self.map;
        let (text, int) = (self.dialect.text_type(), self.dialect.int_type());
        let index = self.chunk_index_name();
        vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {} ({} {text} PRIMARY KEY, {} {text} NOT NULL, {} {int} NOT NULL, {} {text} NOT NULL)",
                m.chunks, m.chunk_key, m.chunk_stream, m.chunk_seq, m.chunk_text
            ),
            // Reads are always "this stream's chunks in order", and compaction deletes by stream.
            format!("CREATE INDEX IF NOT EXISTS {index} ON {} ({}, {})", m.chunks, m.chunk_stream, m.chunk_seq),
        ]
    }

    /// The chunk table's index: `<chunk table>_stream_seq`, or, where that would be longer than
    /// the database keeps, the table name cut short at a character boundary plus 8 hex digits
    /// of its SHA-256 (two long names never share an index name).
    fn chunk_index_name(&self) -> Ident {
        const SUFFIX: &str = "_stream_seq";
        let table = self.map.chunks.name();
        let max = self.dialect.max_identifier_bytes();
        let name = if table.len() + SUFFIX.len() <= max {
            format!("{table}{SUFFIX}")
        } else {
            use sha2::Digest;
            let digest = sha2::Sha256::digest(table.as_bytes());
            let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
            let mut keep = max - SUFFIX.len() - 1 - hash.len();
            while !table.is_char_boundary(keep) {
                keep -= 1;
            }
            format!("{}_{hash}{SUFFIX}", &table[..keep])
        };
        Ident::new(&name).expect("a valid table name's prefix, hex digits and a suffix, within the length limit")
    }

    /// The open probe: the row's length and status, read once and judged by
    /// [`super::rows::judge_probe`].
    pub fn probe_open(&self, stream_id: &str) -> Statement {
        let m = &self.map;
        Statement {
            sql: format!("SELECT {} AS seq, {} AS status FROM {} WHERE {} = {}", m.seq, m.status, m.message, m.key, self.p(1)),
            params: vec![stream_id.into()],
        }
    }

    /// The open write. It marks the row only where no producer holds it and no seal ended it
    /// (`status IS NULL OR status NOT IN ('streaming', <every terminal status>)`): a late retry
    /// of a mark whose first attempt committed can never make a sealed row `streaming` again,
    /// whatever the probe read. With a host column it is the CAS half of the single-flight guard,
    /// and [`Self::read_host`] names the winner.
    pub fn mark_streaming(&self, stream_id: &str, host_token: &str, format: Format) -> Statement {
        let m = &self.map;
        let mut sets = vec![(&m.status, Value::from(STATUS_STREAMING))];
        if let Some(host) = &m.host {
            sets.push((host, host_token.into()));
        }
        if let Some(col) = &m.format {
            sets.push((col, format.as_str().into()));
        }
        let set_sql: Vec<String> = sets.iter().enumerate().map(|(i, (col, _))| format!("{col} = {}", self.p(i + 1))).collect();
        let mut params: Vec<Value> = sets.into_iter().map(|(_, v)| v).collect();
        params.push(stream_id.into());
        let key = self.p(params.len());
        // `streaming` is param 1; the terminal statuses follow the key.
        let terminal: Vec<String> = EndStatus::ALL
            .iter()
            .map(|status| {
                params.push(status.as_str().into());
                self.p(params.len())
            })
            .collect();
        let sql = format!(
            "UPDATE {} SET {} WHERE {} = {key} AND ({} IS NULL OR {} NOT IN ({}, {}))",
            m.message,
            set_sql.join(", "),
            m.key,
            m.status,
            m.status,
            self.p(1),
            terminal.join(", ")
        );
        Statement { sql, params }
    }

    /// A revival's claim (see [`crate::engine::host::store::ClaimHost`]): the row passes from
    /// `old` to `new` only while it is `streaming` and still holds `old`. `None` when no host
    /// column is mapped.
    pub fn claim_host(&self, stream_id: &str, old: &str, new: &str) -> Option<Statement> {
        let m = &self.map;
        let host = m.host.as_ref()?;
        let p = |n| self.p(n);
        Some(Statement {
            sql: format!(
                "UPDATE {} SET {host} = {} WHERE {} = {} AND {} = {} AND {host} = {}",
                m.message,
                p(1),
                m.key,
                p(2),
                m.status,
                p(3),
                p(4)
            ),
            params: vec![new.into(), stream_id.into(), STATUS_STREAMING.into(), old.into()],
        })
    }

    /// The read-back half of the open CAS; `None` when no host column is mapped.
    pub fn read_host(&self, stream_id: &str) -> Option<Statement> {
        let m = &self.map;
        let host = m.host.as_ref()?;
        Some(Statement {
            sql: format!("SELECT {host} AS host FROM {} WHERE {} = {}", m.message, m.key, self.p(1)),
            params: vec![stream_id.into()],
        })
    }

    /// One checkpoint, run as ONE transaction, fenced (see [`RowGuard`]): compare-and-swap the
    /// row's length from `from` to `to` where the row is still `streaming` at `from` and, with
    /// `host_token`, held by it; and insert the slice `[from, to)` as a chunk row only where that
    /// swap happens. A replay, a stale re-cover after a lost ack, a lost instance's late write
    /// (its token replaced by a revival's claim) and a write to a row sealed meanwhile change
    /// nothing and leave no chunk row; which case happened is decided by [`Self::read_state`],
    /// never assumed.
    ///
    /// SQLite (D1) runs one writer at a time, so there the insert is guarded by the same fence
    /// and absorbs a replay with `ON CONFLICT DO NOTHING`, then the swap follows: two statements.
    /// PostgreSQL runs writers side by side, and in its default isolation (read committed) a
    /// guard read in a subquery sees the row as it was when the statement began, not what a
    /// concurrent writer is about to commit: two hosts racing from the same `from` would both
    /// land a chunk. There the swap comes first, in a data-modifying `WITH` whose `UPDATE` waits
    /// for the row lock and re-checks the fence against the committed row, and the chunk is
    /// inserted from its result: one statement, one round trip. Each value has its own
    /// placeholder, so the app's key column may be of another type than the chunk's text column
    /// (a `uuid` key).
    pub fn append(&self, stream_id: &str, from: Offset, to: Offset, text: &str, host_token: Option<&str>) -> Vec<Statement> {
        let m = &self.map;
        let p = |n| self.p(n);
        let guard = RowGuard { durable_seq: from, host_token: host_token.map(str::to_owned) };
        let chunk: [Value; 4] = [chunk_id(stream_id, to).into(), stream_id.into(), to.into(), text.into()];
        match self.dialect {
            Dialect::Sqlite => {
                let (fence, fence_params) = self.guard_clause(&guard, 6);
                let (swap_fence, swap_params) = self.guard_clause(&guard, 3);
                let mut insert_params = chunk.to_vec();
                insert_params.push(stream_id.into());
                insert_params.extend(fence_params);
                vec![
                    Statement {
                        sql: format!(
                            "INSERT INTO {} ({}, {}, {}, {}) SELECT {}, {}, {}, {} WHERE EXISTS (SELECT 1 FROM {} WHERE {} = {}{fence}) ON CONFLICT DO NOTHING",
                            m.chunks, m.chunk_key, m.chunk_stream, m.chunk_seq, m.chunk_text,
                            p(1), p(2), p(3), p(4), m.message, m.key, p(5)
                        ),
                        params: insert_params,
                    },
                    Statement {
                        sql: format!("UPDATE {} SET {} = {} WHERE {} = {}{swap_fence}", m.message, m.seq, p(1), m.key, p(2)),
                        params: [vec![to.into(), stream_id.into()], swap_params].concat(),
                    },
                ]
            }
            // No `ON CONFLICT` here: when the swap happened no chunk can end at `to` yet, and
            // one that does means the row and its chunks disagree, which fails the checkpoint
            // (rolled back whole) rather than advancing the row past a slice it did not store.
            Dialect::Postgres => {
                let (fence, fence_params) = self.guard_clause(&guard, 3);
                let first = 3 + fence_params.len();
                let mut params: Vec<Value> = vec![to.into(), stream_id.into()];
                params.extend(fence_params);
                params.extend(chunk);
                vec![Statement {
                    sql: format!(
                        "WITH \"swapped\" AS (UPDATE {} SET {} = {} WHERE {} = {}{fence} RETURNING 1) INSERT INTO {} ({}, {}, {}, {}) SELECT {}, {}, {}, {} FROM \"swapped\"",
                        m.message, m.seq, p(1), m.key, p(2),
                        m.chunks, m.chunk_key, m.chunk_stream, m.chunk_seq, m.chunk_text, p(first), p(first + 1), p(first + 2), p(first + 3)
                    ),
                    params,
                }]
            }
        }
    }

    /// The read-back after every checkpoint: the stored length (the only thing that advances
    /// `durableSeq`) and, when mapped, the cancel flag.
    pub fn read_state(&self, stream_id: &str) -> Statement {
        let m = &self.map;
        let cancel = m.cancel.as_ref().map_or(String::new(), |c| format!(", {c} AS cancel"));
        Statement {
            sql: format!("SELECT {} AS seq{cancel} FROM {} WHERE {} = {}", m.seq, m.message, m.key, self.p(1)),
            params: vec![stream_id.into()],
        }
    }

    /// The seal, as ONE transaction, guarded (see [`RowGuard`]): it applies only while the
    /// row is still `streaming` at `guard.durable_seq` and, where a host column is mapped, held
    /// by `guard.host_token`. With a `body` it compacts: the whole body, its length and the
    /// status go on the row and the stream's chunk rows go away, which also repairs an earlier
    /// failed checkpoint; without one it seals in place (the chunk rows are the durable text,
    /// and only the status and error change). A compaction deletes the chunk rows only where its
    /// update applied (they are the text of a row sealed in place, or of a longer durable text
    /// the sealer did not know of): on SQLite the delete runs first under the same guard, in
    /// the same transaction (one writer at a time, so both see one state); on Postgres, whose
    /// statements in read committed may see different states, the delete hangs off the update's
    /// `RETURNING` in one statement, after the update waited for the row lock and re-checked
    /// the guard. [`Self::read_summary`] then says whether it applied.
    pub fn seal(&self, stream_id: &str, body: Option<&str>, status: EndStatus, error: Option<&str>, guard: &RowGuard) -> Vec<Statement> {
        let m = &self.map;
        let Some(body) = body else {
            return vec![self.seal_update(stream_id, vec![(&m.status, status.as_str().into())], error, guard)];
        };
        let update = self.seal_update(stream_id, self.compacted_columns(body, status), error, guard);
        match self.dialect {
            Dialect::Sqlite => {
                // The update's guard, numbered after the delete's own parameter.
                let (guard_sql, guard_params) = self.guard_clause(guard, 2);
                let key = self.p(guard_params.len() + 2);
                let mut params: Vec<Value> = vec![stream_id.into()];
                params.extend(guard_params);
                params.push(stream_id.into());
                let delete = Statement {
                    sql: format!(
                        "DELETE FROM {} WHERE {} = {} AND EXISTS (SELECT 1 FROM {} WHERE {} = {key}{guard_sql})",
                        m.chunks,
                        m.chunk_stream,
                        self.p(1),
                        m.message,
                        m.key
                    ),
                    params,
                };
                vec![delete, update]
            }
            Dialect::Postgres => {
                let n = update.params.len() + 1;
                let mut params = update.params;
                params.push(stream_id.into());
                vec![Statement {
                    sql: format!(
                        "WITH \"sealed\" AS ({} RETURNING 1) DELETE FROM {} WHERE {} = {} AND EXISTS (SELECT 1 FROM \"sealed\")",
                        update.sql,
                        m.chunks,
                        m.chunk_stream,
                        self.p(n)
                    ),
                    params,
                }]
            }
        }
    }

    /// The columns a compaction writes: the body, its length and the status.
    fn compacted_columns(&self, body: &str, status: EndStatus) -> Vec<(&Ident, Value)> {
        let m = &self.map;
        vec![(&m.body, body.into()), (&m.seq, crate::engine::text::utf16::len(body).into()), (&m.status, status.as_str().into())]
    }

    /// The fence of a durable write: ` AND status = 'streaming' AND seq = durable_seq [AND host =
    /// token]`, its placeholders numbered from `first`.
    fn guard_clause(&self, guard: &RowGuard, first: usize) -> (String, Vec<Value>) {
        let m = &self.map;
        let mut sql = format!(" AND {} = {} AND {} = {}", m.status, self.p(first), m.seq, self.p(first + 1));
        let mut params: Vec<Value> = vec![STATUS_STREAMING.into(), guard.durable_seq.into()];
        if let (Some(host), Some(token)) = (&m.host, &guard.host_token) {
            sql.push_str(&format!(" AND {host} = {}", self.p(first + 2)));
            params.push(token.as_str().into());
        }
        (sql, params)
    }

    /// `UPDATE message SET col = value, … [, error = …] WHERE key = stream_id [AND guard]`; the
    /// error column is written only where it is mapped.
    fn seal_update<'a>(
        &'a self,
        stream_id: &str,
        mut columns: Vec<(&'a Ident, Value)>,
        error: Option<&str>,
        guard: &RowGuard,
    ) -> Statement {
        let m = &self.map;
        if let Some(col) = &m.error {
            columns.push((col, error.into()));
        }
        let sets: Vec<String> = columns.iter().enumerate().map(|(i, (col, _))| format!("{col} = {}", self.p(i + 1))).collect();
        let mut params: Vec<Value> = columns.into_iter().map(|(_, v)| v).collect();
        params.push(stream_id.into());
        let mut sql = format!("UPDATE {} SET {} WHERE {} = {}", m.message, sets.join(", "), m.key, self.p(params.len()));
        let (clause, guard_params) = self.guard_clause(guard, params.len() + 1);
        sql.push_str(&clause);
        params.extend(guard_params);
        Statement { sql, params }
    }

    /// Sets the row's cancel flag; `None` when no cancel column is mapped.
    pub fn request_cancel(&self, stream_id: &str) -> Option<Statement> {
        let m = &self.map;
        let cancel = m.cancel.as_ref()?;
        let truth = match self.dialect {
            Dialect::Sqlite => Value::Int(1),
            Dialect::Postgres => Value::Bool(true),
        };
        Some(Statement {
            sql: format!("UPDATE {} SET {cancel} = {} WHERE {} = {}", m.message, self.p(1), m.key, self.p(2)),
            params: vec![truth, stream_id.into()],
        })
    }

    /// The row half of the durable text: body, length, status and (where mapped) error.
    pub fn read_row(&self, stream_id: &str) -> Statement {
        self.select_row(stream_id, true)
    }

    /// The row's status, length and (where mapped) error, without its body: what a seal reads
    /// in its own transaction to learn whether it applied.
    pub fn read_summary(&self, stream_id: &str) -> Statement {
        self.select_row(stream_id, false)
    }

    fn select_row(&self, stream_id: &str, with_body: bool) -> Statement {
        let m = &self.map;
        let body = if with_body { format!("{} AS body, ", m.body) } else { String::new() };
        let error = m.error.as_ref().map_or_else(|| "NULL".to_owned(), |col| col.to_string());
        Statement {
            sql: format!(
                "SELECT {body}{} AS seq, {} AS status, {error} AS error FROM {} WHERE {} = {}",
                m.seq,
                m.status,
                m.message,
                m.key,
                self.p(1)
            ),
            params: vec![stream_id.into()],
        }
    }

    /// The chat's streaming answer (the resume GET for a chat); `None` when no chat column is
    /// mapped. The first by key when an app lets several stream at once.
    pub fn streaming_in_chat(&self, chat_id: &str) -> Option<Statement> {
        let m = &self.map;
        let chat = m.chat.as_ref()?;
        Some(Statement {
            sql: format!(
                "SELECT {} AS id FROM {} WHERE {chat} = {} AND {} = {} ORDER BY {} LIMIT 1",
                m.key,
                m.message,
                self.p(1),
                m.status,
                self.p(2),
                m.key
            ),
            params: vec![chat_id.into(), STATUS_STREAMING.into()],
        })
    }

    /// A chat's answers as its feed checks them (SPEC §11): those `streaming`, and the rows of
    /// `open` (the answers the feed believes in flight), each with its status and length; `None`
    /// when no chat column is mapped. At most [`MAX_CHECKED_ANSWERS`] of `open` are bound.
    pub fn chat_answers(&self, chat_id: &str, open: &[String]) -> Option<Statement> {
        let m = &self.map;
        let chat = m.chat.as_ref()?;
        let open = &open[..open.len().min(MAX_CHECKED_ANSWERS)];
        let named = match open.len() {
            0 => String::new(),
            n => format!(" OR {} IN ({})", m.key, (3..3 + n).map(|i| self.p(i)).collect::<Vec<_>>().join(", ")),
        };
        let mut params: Vec<Value> = vec![chat_id.into(), STATUS_STREAMING.into()];
        params.extend(open.iter().map(|id| Value::from(id.as_str())));
        Some(Statement {
            sql: format!(
                "SELECT {} AS id, {} AS status, {} AS seq FROM {} WHERE {chat} = {} AND ({} = {}{named})",
                m.key,
                m.status,
                m.seq,
                m.message,
                self.p(1),
                m.status,
                self.p(2)
            ),
            params,
        })
    }

    /// The chat a message belongs to (a read through a token's `chat` claim must be of that
    /// chat); `None` when no chat column is mapped.
    pub fn chat_of(&self, stream_id: &str) -> Option<Statement> {
        let m = &self.map;
        let chat = m.chat.as_ref()?;
        Some(Statement {
            sql: format!("SELECT {chat} AS chat FROM {} WHERE {} = {}", m.message, m.key, self.p(1)),
            params: vec![stream_id.into()],
        })
    }

    /// The durable text in ONE statement, so ONE snapshot: the row (`part` 0: body, length,
    /// status, error, format, and the host and cancel columns where mapped) and its chunk rows (`part`
    /// 1: text and end offset), as `UNION ALL`. Two queries could straddle a compaction and return
    /// the row before it with the chunks after it (a shorter text, which would let a rehydrated
    /// `durableSeq` fall). Each branch binds the id with its own placeholder: the key and the
    /// chunk's stream column may differ in type (a `uuid` key), and Postgres infers one type per
    /// placeholder.
    pub fn read_durable(&self, stream_id: &str) -> Statement {
        let m = &self.map;
        let error = m.error.as_ref().map_or_else(|| "NULL".to_owned(), |col| col.to_string());
        let format = m.format.as_ref().map_or_else(|| "NULL".to_owned(), |col| col.to_string());
        // Each only where mapped: a row read without the host column has no host to compare,
        // one without the cancel column no Stop recorded on it.
        let mut optional = String::new();
        let mut nulls = String::new();
        for (col, alias) in [(&m.host, "host"), (&m.cancel, "cancel")] {
            if let Some(col) = col {
                optional.push_str(&format!(", {col} AS {alias}"));
                nulls.push_str(", NULL");
            }
        }
        Statement {
            sql: format!(
                "SELECT 0 AS part, {} AS text, {} AS seq, {} AS status, {error} AS error, {format} AS format{optional} FROM {} WHERE {} = {} \
                 UNION ALL SELECT 1, {}, {}, NULL, NULL, NULL{nulls} FROM {} WHERE {} = {}",
                m.body,
                m.seq,
                m.status,
                m.message,
                m.key,
                self.p(1),
                m.chunk_text,
                m.chunk_seq,
                m.chunks,
                m.chunk_stream,
                self.p(2)
            ),
            params: vec![stream_id.into(), stream_id.into()],
        }
    }

    /// The chunk half of the durable text, in `seq` order.
    pub fn read_chunks(&self, stream_id: &str) -> Statement {
        let m = &self.map;
        Statement {
            sql: format!(
                "SELECT {} AS seq, {} AS text FROM {} WHERE {} = {} ORDER BY {}",
                m.chunk_seq,
                m.chunk_text,
                m.chunks,
                m.chunk_stream,
                self.p(1),
                m.chunk_seq
            ),
            params: vec![stream_id.into()],
        }
    }
}
