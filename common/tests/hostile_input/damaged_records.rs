//! The nastiest damaged records, one by one: deep nesting, NUL bytes,
//! invalid UTF-8, numbers out of range, and plans whose numbers disagree
//! (a task reading a file the plan does not list, or 100 MB of a 10-byte
//! file), decoded directly and read through a checkpoint on disk.

use std::fmt::Debug;

use serde::de::DeserializeOwned;
use sluice_common::checkpoint::{
    Checkpoint, CommitRecord, Log, OffsetRecord, QUERIES_DIR, SchemaRecord, decode, padded,
    parse_padded,
};
use sluice_common::epochs::EpochClaim;
use sluice_common::storage::Stores;

use crate::names_file;
use crate::records::kinds;

fn refusal<T: DeserializeOwned + Debug>(bytes: &[u8]) -> String {
    let path = "/ckpt/queries/q/offsets/00000000000000000007";
    let text = decode::<T>(bytes, path).unwrap_err().to_string();
    assert!(names_file(&text, path), "{text}");
    text
}

#[test]
fn deep_nesting_nul_bytes_bad_utf8_and_huge_numbers_are_refused() {
    let deep = format!("{{\"x\": {}", "[".repeat(10_000));
    assert!(refusal::<OffsetRecord>(deep.as_bytes()).contains("EOF while parsing a list"));
    // A type within itself (a list of lists of ...) stops at serde_json's limit.
    let deep = format!(
        "{{\"version\": 1, \"epoch\": 1, \"schema\": {{\"fields\": [{}",
        "{\"data_type\": {\"List\": ".repeat(10_000)
    );
    assert!(refusal::<SchemaRecord>(deep.as_bytes()).contains("recursion limit exceeded"));
    assert!(refusal::<CommitRecord>(b"\0\0\0\0").contains("expected value at line 1 column 1"));
    let (_, commit, _) = kinds()
        .into_iter()
        .find(|(path, ..)| path.contains("/commits/"))
        .unwrap();
    let bad = String::from_utf8_lossy(&commit).replace("150", "18446744073709551616");
    let err = refusal::<CommitRecord>(bad.as_bytes());
    assert!(err.contains("field `num_rows`: invalid type"), "{err}");
    let mut bytes = b"{\"version\": 1, \"driver\": \"".to_vec();
    bytes.extend([0xff, 0xfe, b'"', b'}']);
    assert!(refusal::<EpochClaim>(&bytes).contains("line 1 column"));
}

#[test]
fn a_plan_whose_tasks_leave_its_files_is_refused() {
    let plan = |tasks: &str, files: &str| {
        let text = format!(
            r#"{{"version":1,"batch_id":7,"epoch":1,"batch_timestamp_ms":0,
            "source":{{"files":{{"start_seq":0,"end_seq":1,"files":[{files}],"tasks":[{tasks}]}}}}}}"#
        );
        refusal::<OffsetRecord>(text.as_bytes())
    };
    let one = r#"{"path":"a","size":10}"#;
    let err = plan(r#"[{"file":5,"start":0,"end":1}]"#, one);
    assert!(
        err.contains("field `source`: task 0 reads file 5 of 1 listed"),
        "{err}"
    );
    // A range that claims 100 MB of a 10-byte file.
    let err = plan(r#"[{"file":0,"start":0,"end":104857600}]"#, one);
    assert!(
        err.contains("reads bytes 0..104857600 of \"a\", which has 10 bytes"),
        "{err}"
    );
    let err = plan("", &format!("{one},{one}"));
    assert!(
        err.contains("start_seq 0 and end_seq 1, but 2 files listed"),
        "{err}"
    );
    let backwards = br#"{"version":1,"batch_id":7,"epoch":1,"batch_timestamp_ms":0,
        "source":{"rate":{"start_value":9,"end_value":3}}}"#;
    let err = refusal::<OffsetRecord>(backwards);
    assert!(err.contains("start_value 9 is after end_value 3"), "{err}");
}

#[tokio::test]
async fn readers_refuse_damage_by_file_name() {
    let dir = tempfile::tempdir().unwrap();
    let cp = Checkpoint::open(&Stores::default(), dir.path().to_str().unwrap()).unwrap();
    let q = cp.query("q");
    let offsets = dir
        .path()
        .join(QUERIES_DIR)
        .join("q")
        .join(Log::Offsets.dir());
    std::fs::create_dir_all(&offsets).unwrap();
    let plan = r#"{"version":1,"batch_id":7,"epoch":1,"batch_timestamp_ms":0,
        "source":{"rate":{"start_value":9,"end_value":3}}}"#;
    std::fs::write(offsets.join(padded(7)), plan).unwrap();
    let err = q.offsets(7).await.unwrap_err().to_string();
    assert!(
        err.contains(&padded(7)) && err.contains("after end_value"),
        "{err}"
    );
    // A name that `u64::from_str` reads as batch 1 is not batch 1's file.
    std::fs::write(offsets.join("+0000000000000000001"), plan).unwrap();
    let err = q.batches(Log::Offsets).await.unwrap_err().to_string();
    assert!(err.contains("+0000000000000000001"), "{err}");
    assert!(parse_padded("+0000000000000000001").is_none());
}
