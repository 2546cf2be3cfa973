//! The plan of queries over rate streams, their SQL checked as the
//! submit checks it: no cluster, no files.

use super::*;

const RATE: &str = "{rate: {partitions: 1, rows_per_second: 10}}";

/// An aggregation without a window feeding another.
const CHAIN: &str = "SELECT n, count(*) AS c FROM (SELECT value % 10 AS k, count(*) AS n \
                     FROM input GROUP BY value % 10) GROUP BY n";

/// The plan of [`CHAIN`] with the spec's `extra` fields.
async fn chain_with(extra: &str) -> Result<Vec<StatefulOp>, PlanError> {
    plan_of(&format!("source: {RATE}\nsql: \"{CHAIN}\"\n{extra}")).await
}

fn spec(extra: &str) -> QuerySpec {
    let yaml = format!("name: q\nsink:\n  files:\n    path: /tmp/out\n{extra}");
    QuerySpec::parse(&yaml).unwrap()
}

/// `spec`'s SQL checked over its streams (rate streams).
async fn checked(spec: &QuerySpec) -> Checked {
    let streams: Vec<_> = spec
        .inputs()
        .iter()
        .map(|i| (i.name.to_string(), sluice_common::rate::schema()))
        .collect();
    let budget = sluice_sql::guard::DEFAULT_BUDGET;
    sluice_sql::check(spec.sql(), &streams, &[], budget)
        .await
        .unwrap()
}

async fn plan_of(extra: &str) -> Result<Vec<StatefulOp>, PlanError> {
    let spec = spec(extra);
    plan(&spec, &checked(&spec).await)
}

fn operators(ops: &[StatefulOp]) -> Vec<(&str, &Operator, bool)> {
    ops.iter()
        .map(|o| (o.name.as_str(), &o.operator, o.ttl))
        .collect()
}

#[tokio::test]
async fn a_query_without_state_has_no_operators() {
    let ops = plan_of(&format!("source: {RATE}\nsql: SELECT value FROM input\n")).await;
    assert_eq!(ops, Ok(vec![]));
}

#[tokio::test]
async fn dedup_is_one_operator_reading_every_stream() {
    let ops = plan_of(&format!(
        "source: {RATE}\nwatermark: {{column: timestamp_ms, delay_ms: 0}}\n\
         dedup: {{columns: [value], within_ms: 500}}\nstate_ttl_ms: 1000\n"
    ))
    .await
    .unwrap();
    let dedup = pb::Dedup {
        columns: vec!["value".into()],
        within_ms: 500,
    };
    assert_eq!(
        ops,
        vec![StatefulOp {
            operator: Operator::Dedup(dedup),
            name: DEDUP.into(),
            sources: vec![Source::Streams(vec!["input".into()])],
            consumer: None,
            ttl: false,
        }]
    );
}

#[tokio::test]
async fn an_aggregation_without_a_window_expires_its_keys_with_a_ttl() {
    let sql = "SELECT value % 10 AS k, count(*) AS n FROM input GROUP BY value % 10";
    let with = |ttl: &str| format!("source: {RATE}\nsql: \"{sql}\"\noutput_mode: update\n{ttl}");
    let ops = plan_of(&with("state_ttl_ms: 1000\n")).await.unwrap();
    let aggregate = Operator::Aggregate(OutputMode::Update, pb::Changes::None);
    assert_eq!(operators(&ops), vec![("aggregate", &aggregate, true)]);
    assert_eq!(ops[0].consumer, None);
    let ops = plan_of(&with("")).await.unwrap();
    assert_eq!(operators(&ops), vec![("aggregate", &aggregate, false)]);
}

#[tokio::test]
async fn an_aggregation_feeds_the_next_its_changes_and_neither_expires() {
    let ops = chain_with("output_mode: complete\nstate_ttl_ms: 1000\n")
        .await
        .unwrap();
    let (first, second) = (ops[0].name.clone(), ops[1].name.clone());
    assert_ne!(first, second, "each operator its own state directory");
    let emits = Operator::Aggregate(OutputMode::Complete, pb::Changes::Emit);
    let reads = Operator::Aggregate(OutputMode::Complete, pb::Changes::Read);
    assert_eq!(
        operators(&ops),
        vec![
            (first.as_str(), &emits, false),
            (second.as_str(), &reads, false)
        ]
    );
    assert_eq!(ops[0].consumer, Some((1, 0)));
    assert_eq!(ops[1].sources, vec![Source::Operator(0)]);
}

#[tokio::test]
async fn a_windowed_aggregation_feeds_the_next_final_rows_in_append_mode() {
    let sql = "SELECT w, count(*) AS c FROM (SELECT window(timestamp_ms, INTERVAL '1' SECOND) AS w, \
               value % 10 AS k, count(*) AS n FROM input \
               GROUP BY window(timestamp_ms, INTERVAL '1' SECOND), value % 10) GROUP BY w";
    let ops = plan_of(&format!(
        "source: {RATE}\nwatermark: {{column: timestamp_ms, delay_ms: 0}}\n\
         sql: \"{sql}\"\noutput_mode: update\n"
    ))
    .await
    .unwrap();
    assert_eq!(ops.len(), 2, "{ops:?}");
    assert_eq!(
        ops[0].operator,
        Operator::Aggregate(OutputMode::Append, pb::Changes::None)
    );
    assert_eq!(
        ops[1].operator,
        Operator::Aggregate(OutputMode::Update, pb::Changes::None)
    );
}

#[tokio::test]
async fn an_aggregation_that_feeds_another_in_append_mode_is_refused_naming_both() {
    let err = chain_with("output_mode: append\n").await.unwrap_err();
    let PlanError::Invalid(why) = err else {
        panic!("{err:?}")
    };
    assert!(
        why.contains("in append mode it must emit each group once"),
        "{why}"
    );
    assert!(why.matches('`').count() >= 4, "names both operators: {why}");
}

#[tokio::test]
async fn a_join_evicts_by_its_bound_the_sides_the_other_watermarks() {
    let sql = "SELECT o.value, p.value AS pv FROM o JOIN p ON o.value = p.value \
               AND p.timestamp_ms BETWEEN o.timestamp_ms AND o.timestamp_ms + INTERVAL '10 seconds'";
    let join = |watermarks: &str| {
        format!(
            "sources:\n  o: {RATE}\n  p: {RATE}\n{watermarks}sql: \"{sql}\"\nstate_ttl_ms: 1000\n"
        )
    };
    let both = "watermarks:\n  o: {column: timestamp_ms, delay_ms: 0}\n  p: {column: timestamp_ms, delay_ms: 0}\n";
    let ops = plan_of(&join(both)).await.unwrap();
    assert_eq!(
        operators(&ops),
        vec![("join", &Operator::Join([true, true]), false)]
    );
    let only_p = "watermarks:\n  p: {column: timestamp_ms, delay_ms: 0}\n";
    let ops = plan_of(&join(only_p)).await.unwrap();
    assert_eq!(
        ops[0].operator,
        Operator::Join([true, false]),
        "left rows leave by p's watermark"
    );
}

#[tokio::test]
async fn a_join_without_a_bound_expires_its_keys_with_a_ttl() {
    let sql = "SELECT o.value, p.value AS pv FROM o JOIN p ON o.value = p.value";
    let ops = plan_of(&format!(
        "sources:\n  o: {RATE}\n  p: {RATE}\nsql: \"{sql}\"\nstate_ttl_ms: 1000\n"
    ))
    .await
    .unwrap();
    assert_eq!(
        operators(&ops),
        vec![("join", &Operator::Join([false, false]), true)]
    );
}

#[test]
fn each_operator_is_told_its_work() {
    let state = pb::StateWork {
        operator: "aggregate".into(),
        ..Default::default()
    };
    let aggregate = Operator::Aggregate(OutputMode::Update, pb::Changes::Read);
    let pb::task_assignment::Work::Aggregate(work) = aggregate.reduce(state.clone()) else {
        panic!("an aggregation's work")
    };
    assert_eq!(work.state, Some(state));
    assert_eq!(work.changes, i32::from(pb::Changes::Read));
    assert_eq!(work.output_mode, i32::from(OutputMode::Update.to_proto()));
    let pb::task_assignment::Work::Join(work) = Operator::Join([true, false]).work(None) else {
        panic!("a join's work")
    };
    assert_eq!(
        (work.evict_left, work.evict_right, work.state),
        (true, false, None)
    );
}
