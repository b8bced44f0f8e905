-- The stream's format ("text" or "ui"), written when its stream opens (COLUMNS "format"): the twin
-- of migrations/0003_message_format.sql.
ALTER TABLE "messages" ADD COLUMN IF NOT EXISTS "format" text;
