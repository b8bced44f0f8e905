-- Example app's message table in PostgreSQL (the app owns it; SPEC §5), the twin of
-- migrations/0001_messages.sql. The stream plane needs id, body, status, seq (NOT NULL DEFAULT 0)
-- and optionally cancel, error, host. Mapping onto an existing schema: docs/POSTGRES.md.
CREATE TABLE IF NOT EXISTS "messages" ("id" text PRIMARY KEY, "chat_id" text NOT NULL, "role" text NOT NULL, "body" text NOT NULL DEFAULT '', "status" text NOT NULL DEFAULT 'pending', "seq" bigint NOT NULL DEFAULT 0, "cancel" boolean NOT NULL DEFAULT false, "error" text, "host" text, "created_at" timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS "messages_chat_id" ON "messages" ("chat_id");
