-- The stream's format ("text" or "ui"), written when its stream opens (COLUMNS "format"): a `/ui`
-- read of a finished answer learns it from the row, so the stream's Durable Object keeps nothing
-- once the answer is over (docs/SURVIVING.md, "What the object keeps").
ALTER TABLE "messages" ADD COLUMN "format" TEXT;
