CREATE TABLE IF NOT EXISTS "message_chunks" ("id" TEXT PRIMARY KEY, "streamId" TEXT NOT NULL, "seq" INTEGER NOT NULL, "text" TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS "message_chunks_stream_seq" ON "message_chunks" ("streamId", "seq");
