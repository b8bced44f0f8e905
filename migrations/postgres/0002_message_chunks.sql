CREATE TABLE IF NOT EXISTS "message_chunks" ("id" text PRIMARY KEY, "streamId" text NOT NULL, "seq" bigint NOT NULL, "text" text NOT NULL);
CREATE INDEX IF NOT EXISTS "message_chunks_stream_seq" ON "message_chunks" ("streamId", "seq");
