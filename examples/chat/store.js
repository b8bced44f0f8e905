// The example chat's own message store (worker.js): its few statements, written once, run on D1
// (SQLite) or on PostgreSQL through Hyperdrive. With a `HYPERDRIVE` binding the chat keeps its
// messages in Postgres (node-postgres, `pg`, as Cloudflare's Hyperdrive docs show it: a client
// per request, Hyperdrive pools the connections); without one, in D1 (`DB`). rindle-streams
// must use the same database (its DURABLE_BACKEND: docs/POSTGRES.md), since the app inserts the
// rows the stream plane fills (SPEC §5).
//
// The statements are SQLite's and Postgres's common ground (`?N` placeholders, sent as `$N` to
// Postgres; quoted identifiers; `INSERT … SELECT … WHERE … ON CONFLICT DO NOTHING`); the two
// places where the dialects differ are the `dialect` fragments below.
import pg from 'pg';

/**
 * An answer in flight: streaming, or inserted and not yet opened (for at most a minute: a Worker
 * that died between the insert and the open must not block the chat for good; a stream that
 * died while streaming is sealed `interrupted` by rindle's lease).
 */
const inFlight = (d) => `(status = 'streaming' OR (status = 'pending' AND created_at > ${d.aMinuteAgo}))`;

const DIALECTS = {
  sqlite: {
    aMinuteAgo: `strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-60 seconds')`,
    /** The elements of a JSON array of strings (a bound parameter), as a one-column `value` table. */
    jsonStrings: (p) => `json_each(${p})`,
    /** Earlier, and later, than any row's `created_at`. */
    beforeAll: `''`,
    afterAll: `'~'`,
  },
  postgres: {
    aMinuteAgo: `now() - interval '60 seconds'`,
    jsonStrings: (p) => `json_array_elements_text(${p}::json)`,
    beforeAll: `'-infinity'::timestamptz`,
    afterAll: `'infinity'::timestamptz`,
  },
};

/**
 * The statements, for dialect `d`. Starting an answer binds the same first five parameters in
 * every statement: ?1 the chat, ?2 the ids of the messages the client sent (JSON), ?3 the last
 * message the client showed (`seen`), ?4 1 when the request replaces messages (a regeneration, or
 * an edit of the question), else 0, and ?5 the question's id.
 */
function statements(d) {
  const at = (id) => `(SELECT x.created_at FROM messages x WHERE x.id = ${id} AND x.chat_id = ?1)`;
  const busy = `EXISTS (SELECT 1 FROM messages WHERE chat_id = ?1 AND role = 'assistant' AND ${inFlight(d)})`;
  // What a regeneration or an edit replaces: the messages from the question on that the client no
  // longer sends (the old answer; for an edit of an earlier question, the turns after it). Turns
  // before the question that the client never had are not its to drop.
  const replaced = `chat_id = ?1 AND id NOT IN (SELECT value FROM ${d.jsonStrings('?2')}) AND created_at >= COALESCE(${at('?5')}, ${d.afterAll})`;
  // ... and it may replace only what its client showed: nothing written after the last message it
  // showed (another tab's turn it has not seen yet).
  const stale = `(?4 = 1 AND EXISTS (SELECT 1 FROM messages WHERE ${replaced} AND created_at > COALESCE(${at('?3')}, ${d.beforeAll})))`;
  const go = `NOT ${busy} AND NOT ${stale}`;
  return {
    // Starting an answer (one transaction): read whether it may start (no answer in flight, and a
    // replacing request drops only what its client showed), drop what a regeneration or an edit
    // replaces, then write the question (an edit rewrites it) and the answer's row, each only while
    // it may start. A plain send drops nothing, so a turn its client missed stays in the chat.
    checkStart: `SELECT ${busy} AS busy, ${stale} AS stale`,
    dropReplaced: `DELETE FROM messages WHERE ${replaced} AND ?4 = 1 AND ${go}`,
    insertQuestion: `INSERT INTO messages (id, chat_id, role, body, status) SELECT ?5, ?1, 'user', ?6, 'complete' WHERE ${go}
      ON CONFLICT (id) DO UPDATE SET body = excluded.body WHERE messages.chat_id = excluded.chat_id`,
    insertAnswer: `INSERT INTO messages (id, chat_id, role) SELECT ?6, ?1, 'assistant' WHERE ${go}`,
    dropUnopened: `DELETE FROM messages WHERE id = ?1 AND status = 'pending'`,
    answerOfChat: `SELECT id FROM messages WHERE id = ?1 AND chat_id = ?2 AND role = 'assistant'`,
    answerInFlight: `SELECT id FROM messages WHERE chat_id = ?1 AND role = 'assistant' AND ${inFlight(d)} LIMIT 1`,
    // The history: rows in the order they were written (a question and its answer are written in
    // one transaction, with the same timestamp on Postgres: the question first).
    historyRows: `SELECT id, role, body, status, ${inFlight(d)} AS in_flight FROM messages WHERE chat_id = ?1 ORDER BY created_at, role = 'assistant'`,
    historyChunks: `SELECT c."streamId" AS "streamId", c.seq AS seq, c.text AS text FROM message_chunks c JOIN messages m ON m.id = c."streamId" WHERE m.chat_id = ?1 ORDER BY c.seq`,
  };
}

/**
 * The chat's store for this request's bindings.
 * @returns {{
 *   startAnswer(a: { chatId: string, keep: string[], seen: string | null, replaces: boolean, questionId: string, question: string, answerId: string, beforeCommit?: () => Promise<unknown> }): Promise<'started' | 'busy' | 'stale'>,
 *   dropUnopened(answerId: string): Promise<void>,
 *   answerToResume(chatId: string, answer: string | null): Promise<string | null>,
 *   history(chatId: string): Promise<{ rows: { id: string, role: string, body: string, status: string, in_flight: unknown }[], chunks: { streamId: string, seq: number, text: string }[] }>,
 * }}
 */
export function chatStore(env, ctx) {
  return env.HYPERDRIVE ? postgresStore(env.HYPERDRIVE, ctx) : d1Store(env.DB);
}

function d1Store(db) {
  const sql = statements(DIALECTS.sqlite);
  return {
    /**
     * `started` when the answer's row was inserted; `busy` when the chat is still answering;
     * `stale` when a regeneration or an edit would drop a message the client never showed.
     * (`beforeCommit`, a test's hold between the writes and the commit: a batch has no such point.)
     */
    async startAnswer({ chatId, keep, seen, replaces, questionId, question, answerId }) {
      // One batch is one transaction, and D1 runs one writer at a time: the check of each
      // statement is still true when it writes.
      const common = [chatId, JSON.stringify(keep), seen ?? '', replaces ? 1 : 0, questionId];
      const results = await db.batch([
        db.prepare(sql.checkStart).bind(...common),
        db.prepare(sql.dropReplaced).bind(...common),
        db.prepare(sql.insertQuestion).bind(...common, question),
        db.prepare(sql.insertAnswer).bind(...common, answerId),
      ]);
      if (results[3].meta.changes === 1) return 'started';
      return results[0].results[0].busy ? 'busy' : 'stale';
    },
    async dropUnopened(answerId) {
      await db.prepare(sql.dropUnopened).bind(answerId).run();
    },
    async answerToResume(chatId, answer) {
      const row = answer ? await db.prepare(sql.answerOfChat).bind(answer, chatId).first() : await db.prepare(sql.answerInFlight).bind(chatId).first();
      return row?.id ?? null;
    },
    async history(chatId) {
      // One batch: one transaction, so an answer cannot end between the two reads.
      const [{ results: rows }, { results: chunks }] = await db.batch([db.prepare(sql.historyRows).bind(chatId), db.prepare(sql.historyChunks).bind(chatId)]);
      return { rows, chunks };
    },
  };
}

/** `?N` → `$N`. */
const toPostgres = (text) => text.replace(/\?(\d+)/g, '$$$1');

/** bigint columns (the chunks' seq) as numbers, as D1 reads them: a seq counts UTF-16 units of one message. */
const BIGINT = 20;
const types = { getTypeParser: (oid, format) => (oid === BIGINT ? Number : pg.types.getTypeParser(oid, format)) };

function postgresStore(hyperdrive, ctx) {
  const sql = Object.fromEntries(Object.entries(statements(DIALECTS.postgres)).map(([k, v]) => [k, toPostgres(v)]));
  /** `fn(client)` on a connection of its own, closed after the response (Hyperdrive keeps the pool). */
  async function withClient(fn) {
    const client = new pg.Client({ connectionString: hyperdrive.connectionString, types });
    await client.connect();
    try {
      return await fn(client);
    } finally {
      ctx.waitUntil(client.end());
    }
  }
  /** `fn(client)` in a transaction opened by `begin`, rolled back when it throws. */
  const transaction = (begin, fn) =>
    withClient(async (client) => {
      await client.query(begin);
      try {
        const result = await fn(client);
        await client.query('COMMIT');
        return result;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
    });
  return {
    startAnswer: ({ chatId, keep, seen, replaces, questionId, question, answerId, beforeCommit }) =>
      transaction('BEGIN', async (client) => {
        // Postgres runs writers side by side, and under read committed two sends would both see
        // the chat idle and both insert. The chat's lock, taken first and held to the commit,
        // makes its sends take turns; each statement after it sees what the one before committed.
        await client.query(`SELECT pg_advisory_xact_lock(hashtextextended('rindle-chat:' || $1, 0))`, [chatId]);
        const common = [chatId, JSON.stringify(keep), seen ?? '', replaces ? 1 : 0, questionId];
        const { rows: [check] } = await client.query(sql.checkStart, common);
        if (check.busy) return 'busy';
        if (check.stale) return 'stale';
        await client.query(sql.dropReplaced, common);
        await client.query(sql.insertQuestion, [...common, question]);
        const { rowCount } = await client.query(sql.insertAnswer, [...common, answerId]);
        if (rowCount === 1) await beforeCommit?.(); // tests only: the answer inserted, not yet committed
        return rowCount === 1 ? 'started' : 'busy';
      }),
    async dropUnopened(answerId) {
      await withClient((client) => client.query(sql.dropUnopened, [answerId]));
    },
    answerToResume: (chatId, answer) =>
      withClient(async (client) => {
        const { rows } = answer ? await client.query(sql.answerOfChat, [answer, chatId]) : await client.query(sql.answerInFlight, [chatId]);
        return rows[0]?.id ?? null;
      }),
    // One snapshot for both reads (repeatable read), so an answer cannot end between them.
    history: (chatId) =>
      transaction('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY', async (client) => {
        const { rows } = await client.query(sql.historyRows, [chatId]);
        const { rows: chunks } = await client.query(sql.historyChunks, [chatId]);
        return { rows, chunks };
      }),
  };
}
