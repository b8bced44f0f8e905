// SQLite from the test process, on the files workerd keeps open (local D1, an object's storage):
// Node's built-in node:sqlite (Node >= 22.13, no flag), so no native npm module to compile.
//
// Loaded on first use (process.getBuiltinModule): Node prints an ExperimentalWarning when the
// module loads, and only the files that read SQLite should show it.

/**
 * Opens `file` (a path, or ':memory:'). `busy_timeout` is 5 s (node:sqlite's default is 0): a
 * read waits out a write lock workerd holds instead of failing with SQLITE_BUSY. `readOnly`
 * opens an existing file only (a missing one is an error, never created).
 */
export function openSqlite(file, { readOnly = false } = {}) {
  const { DatabaseSync } = process.getBuiltinModule('node:sqlite');
  const db = new DatabaseSync(file, { readOnly });
  db.exec('PRAGMA busy_timeout = 5000');
  return db;
}

/**
 * A row as a plain object. node:sqlite's rows have a null prototype, which assert's strict
 * deepEqual tells apart from an object literal.
 */
export function plainRow(row) {
  return row === undefined ? undefined : { ...row };
}

/** A BLOB as node:sqlite reads it (a Uint8Array) as a Buffer, whose includes/equals compare bytes. */
export function asBuffer(value) {
  return value instanceof Uint8Array ? Buffer.from(value.buffer, value.byteOffset, value.byteLength) : value;
}

/** The value of a pragma with a single result (`page_count`, `page_size`, ...). */
export function pragmaValue(db, pragma) {
  const row = db.prepare(`PRAGMA ${pragma}`).get();
  return row === undefined ? undefined : Object.values(row)[0];
}
