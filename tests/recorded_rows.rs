//! The Rust and JavaScript assemblers of the durable text agree on rows recorded from the real
//! Worker: `tests/client/fixtures/durable-rows.json` holds message and chunk rows as local D1
//! held them, with the `/text` the Worker answered for them. This test runs the Rust
//! `assemble_durable_text` on each; `tests/client/client.test.mjs` runs `public/client.js`'s
//! `assembleDurableText` on the same file and the same expected texts.

use rindle_streams::engine::text::reading::{assemble_durable_text, ChunkRow, DurableText};
use rindle_streams::engine::text::utf16::Offset;
use serde_json::Value;

fn recorded_rows() -> Vec<Value> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/client/fixtures/durable-rows.json");
    let file: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("read durable-rows.json")).expect("parse durable-rows.json");
    file["rows"].as_array().expect("a rows array").clone()
}

fn chunks(row: &Value) -> Vec<ChunkRow> {
    row["chunks"]
        .as_array()
        .expect("chunks")
        .iter()
        .map(|c| ChunkRow { seq: Offset(c["seq"].as_u64().expect("chunk seq")), text: c["text"].as_str().expect("chunk text").to_owned() })
        .collect()
}

#[test]
fn assemble_durable_text_gives_the_workers_text_for_every_recorded_row_set() {
    let rows = recorded_rows();
    assert!(rows.len() >= 3, "only {} recorded row sets", rows.len());
    let mut with_chunks = 0;
    for row in &rows {
        let what = row["what"].as_str().unwrap_or("?");
        let body = row["body"].as_str().unwrap_or("");
        let expected = row["text"].as_str().expect("the recorded /text");
        let chunks = chunks(row);
        with_chunks += usize::from(!chunks.is_empty());
        assert_eq!(assemble_durable_text(body, chunks.clone()), expected, "{what}");
        let durable = DurableText::assemble(body, chunks, row["status"].as_str().unwrap_or("").to_owned());
        assert_eq!(durable.seq, Offset(expected.encode_utf16().count() as u64), "{what}: seq counts UTF-16 units");
    }
    assert!(with_chunks >= 2, "the recording has row sets with chunk rows");
}
