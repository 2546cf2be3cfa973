//! The query spec as a driver receives it: YAML or JSON text
//! ([`QuerySpec::parse`]), the proto message (`QuerySpec::try_from`), and
//! `spec.json` read back from a checkpoint ([`decode_spec`]).

use proptest::prelude::*;
use prost::Message;
use sluice_common::Error;
use sluice_common::checkpoint::decode_spec;
use sluice_common::spec::QuerySpec;
use sluice_proto as pb;

use crate::mutate::{mutated, random_bytes, random_text};

const PATH: &str = "/ckpt/queries/q/spec.json";

/// The smallest spec: a rate source and a jsonl sink.
const RATE: &str = "name: demo\nsource:\n  rate:\n    partitions: 4\n    rows_per_second: 100\n    total_rows: 1000\ntrigger:\n  interval_ms: 1000\nsink:\n  files:\n    path: /tmp/out\n    format: jsonl\n";

/// A spec that sets every field.
const FILES: &str = r#"name: clicks-by-user
source:
  files:
    path: /data/in
    format: csv
    schema:
      - {name: id, type: bigint}
      - {name: ts, type: timestamp}
      - {name: user, type: string}
    csv: {header: true, delimiter: ";"}
    max_files_per_batch: 100
    on_bad_record: skip
    total_files: 1000
trigger: {interval_ms: 500}
max_rows_per_batch: 100000
sql: |
  SELECT id, ts, users.name FROM input JOIN users USING (user)
tables:
  users:
    path: /data/users.parquet
    format: parquet
output_mode: append
state_partitions: 16
snapshot_interval: 5
watermark: {column: ts, delay_ms: 60000}
dedup: {columns: [id], within_ms: 60000}
sink:
  files:
    path: /data/out
    format: parquet
    partition_by: [name]
    max_file_bytes: 1048576
"#;

fn seeds() -> Vec<QuerySpec> {
    [RATE, FILES]
        .iter()
        .map(|t| QuerySpec::parse(t).expect("a valid seed"))
        .collect()
}

/// The valid specs in each form a user may send: YAML, compact JSON and
/// pretty JSON.
fn texts() -> Vec<Vec<u8>> {
    let mut out: Vec<Vec<u8>> = vec![RATE.into(), FILES.into()];
    for s in seeds() {
        out.push(serde_json::to_vec(&s).unwrap());
        out.push(serde_json::to_vec_pretty(&s).unwrap());
    }
    out
}

/// A spec that parsed: every other form of it parses back to it.
fn round_trips(spec: &QuerySpec) -> Result<(), TestCaseError> {
    let json = serde_json::to_string(spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(&QuerySpec::parse(&json).map_err(fail)?, spec, "{}", json);
    let yaml = serde_yaml_ng::to_string(spec).map_err(|e| TestCaseError::fail(e.to_string()))?;
    match QuerySpec::parse(&yaml) {
        Ok(back) => prop_assert_eq!(&back, spec, "{}", yaml),
        // YAML counts brackets inside strings too: a string with more
        // than 64 open is refused in YAML, not in JSON.
        Err(Error::InvalidSpec { reason, .. }) if reason.starts_with("nested deeper than") => {}
        Err(e) => return Err(fail(e)),
    }
    let proto = pb::QuerySpec::from(spec);
    prop_assert_eq!(&QuerySpec::try_from(&proto).map_err(fail)?, spec);
    prop_assert!(spec.diff(spec).is_empty());
    Ok(())
}

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(format!("a re-encoded spec is refused: {e}"))
}

/// A refused spec: the error names a field, and when that is the whole
/// spec, the line and column or the field at fault.
fn refusal(e: &Error) -> Result<(), TestCaseError> {
    let text = e.to_string();
    let Error::InvalidSpec { field, reason } = e else {
        return Err(TestCaseError::fail(format!("not a spec error: {text}")));
    };
    prop_assert!(!field.is_empty() && !reason.trim().is_empty(), "{}", text);
    let head = format!("invalid spec: field `{field}`: ");
    prop_assert!(text.starts_with(&head), "{}", text);
    if field == "(root)" {
        prop_assert!(locates(reason), "{}", text);
    }
    Ok(())
}

/// Whether `reason` says where the text is wrong, or which field.
fn locates(reason: &str) -> bool {
    (reason.contains("line ") && reason.contains("column "))
        || reason.contains("field `")
        || reason.contains("the limit is")
}

fn parsed(text: &str) -> Result<(), TestCaseError> {
    match QuerySpec::parse(text) {
        Ok(spec) => round_trips(&spec),
        Err(e) => refusal(&e),
    }
}

/// `spec.json` as read from a checkpoint: errors name the file.
fn decoded(bytes: &[u8]) -> Result<(), TestCaseError> {
    match decode_spec(bytes, PATH) {
        Ok(spec) => round_trips(&spec),
        Err(e) => {
            let text = e.to_string();
            prop_assert!(crate::names_file(&text, PATH), "{}", text);
            Ok(())
        }
    }
}

/// The proto message as a submit carries it.
fn from_proto(bytes: &[u8]) -> Result<(), TestCaseError> {
    let Ok(proto) = pb::QuerySpec::decode(bytes) else {
        return Ok(());
    };
    match QuerySpec::try_from(&proto) {
        Ok(spec) => round_trips(&spec),
        Err(e) => {
            let Error::InvalidSpec { field, .. } = &e else {
                return Err(TestCaseError::fail(format!("not a spec error: {e}")));
            };
            prop_assert!(field != "(root)" && !field.is_empty(), "{}", e);
            Ok(())
        }
    }
}

fn protos() -> Vec<Vec<u8>> {
    seeds()
        .iter()
        .map(|s| pb::QuerySpec::from(s).encode_to_vec())
        .collect()
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn random_text_is_refused_by_field_or_position(text in random_text()) {
        parsed(&text)?;
    }

    #[test]
    fn random_bytes_in_spec_json_name_the_file(bytes in random_bytes()) {
        decoded(&bytes)?;
    }

    #[test]
    fn mutated_specs_parse_or_are_refused_by_field_or_position((_, bytes) in mutated(texts())) {
        parsed(&String::from_utf8_lossy(&bytes))?;
        decoded(&bytes)?;
    }

    #[test]
    fn mutated_proto_specs_are_refused_by_field((_, bytes) in mutated(protos())) {
        from_proto(&bytes)?;
    }
}

fn field_and_reason(text: &str) -> (String, String) {
    match QuerySpec::parse(text) {
        Err(Error::InvalidSpec { field, reason }) => (field, reason),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn deep_nesting_is_refused_where_it_starts() {
    let yaml = "nested deeper than 64 levels at line";
    for (text, want) in [
        ("[".repeat(10_000), format!("{yaml} 1 column 65 ")),
        (
            format!("name: demo\nsource: {}", "{rate: ".repeat(100_000)),
            format!("{yaml} 2 column 457 "),
        ),
        (
            format!("sql: '{}'\n{RATE}", "[".repeat(100)),
            format!("{yaml} 1 column 71 "),
        ),
        (
            format!("{{\"name\": {}", "[".repeat(10_000)),
            "invalid type: sequence, expected a string at line 1 column 9".into(),
        ),
    ] {
        let (field, reason) = field_and_reason(&text);
        assert!(reason.contains(&want), "{field}: {reason}");
    }
}

#[test]
fn text_after_a_json_spec_is_refused() {
    let json = serde_json::to_string(&seeds()[0]).unwrap();
    let (field, reason) = field_and_reason(&format!("{json} {{\"name\": \"other\"}}"));
    assert_eq!(field, "(root)");
    assert!(
        reason.starts_with("trailing characters at line 1"),
        "{reason}"
    );
}

#[test]
fn a_huge_spec_is_refused_before_it_is_parsed() {
    let text = format!("name: {}", "x".repeat(100 << 20));
    let (field, reason) = field_and_reason(&text);
    assert_eq!(field, "spec_text");
    assert!(reason.contains("the limit is 1048576 bytes"), "{reason}");
}

#[test]
fn nul_bytes_and_bad_utf8_are_refused_with_their_position_or_file() {
    let (field, reason) = field_and_reason(&RATE.replace("demo", "de\0mo"));
    assert_eq!(field, "(root)");
    assert_eq!(
        reason,
        "character U+0000 is not allowed in YAML at line 1 column 9"
    );
    let (_, reason) = field_and_reason(&format!("\0{RATE}"));
    assert!(reason.ends_with("at line 1 column 1"), "{reason}");
    let mut bytes = RATE.as_bytes().to_vec();
    bytes[7] = 0xff;
    let err = decode_spec(&bytes, PATH).unwrap_err().to_string();
    assert!(err.contains(PATH) && err.contains("not UTF-8"), "{err}");
}

/// Anchors that would expand to 10^12 values: refused by the first key,
/// before any alias is expanded.
#[test]
fn an_alias_bomb_is_refused_before_it_expands() {
    let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..12 {
        let p = i - 1;
        text.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    text.push_str(RATE);
    let (field, reason) = field_and_reason(&text);
    assert_eq!(field, "a0");
    assert!(reason.starts_with("unknown field `a0`"), "{reason}");
    assert!(reason.ends_with("at line 1 column 1"), "{reason}");
}

#[test]
fn out_of_range_numbers_name_their_field() {
    for n in ["-1", "18446744073709551616", "1e400", "4294967296"] {
        let (field, _) =
            field_and_reason(&RATE.replace("partitions: 4", &format!("partitions: {n}")));
        assert_eq!(field, "source.rate.partitions", "{n}");
    }
}
