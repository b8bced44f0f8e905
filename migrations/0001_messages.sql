-- Example app's message table (the app owns it; SPEC §5). The stream plane needs
-- id, body, status, seq (NOT NULL DEFAULT 0) and optionally cancel, error, host.
CREATE TABLE IF NOT EXISTS "messages" ("id" TEXT PRIMARY KEY, "chat_id" TEXT NOT NULL, "role" TEXT NOT NULL, "body" TEXT NOT NULL DEFAULT '', "status" TEXT NOT NULL DEFAULT 'pending', "seq" INTEGER NOT NULL DEFAULT 0, "cancel" INTEGER NOT NULL DEFAULT 0, "error" TEXT, "host" TEXT, "created_at" TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ','now')));
CREATE INDEX IF NOT EXISTS "messages_chat_id" ON "messages" ("chat_id");
