//! Stateful operators that feed each other, over the Nexmark source,
//! while the driver and an executor are SIGKILLed and restarted: an
//! aggregation of an aggregation, a join feeding a top-N (Nexmark q9), an
//! aggregation joined back to its own stream (q7's shape), a join
//! feeding an aggregation, and aggregations of an aggregation without a
//! window, which read its changes (update and complete modes). Each sink equals DataFusion over `generate`'s
//! Parquet files; in append mode each row comes once, final.

use std::time::Duration;

use sluice_tests::oracle::{committed, expected_with, rate_input, rate_start_ms};
use sluice_tests::stateful::{assert_matches, batches, key_of, latest, oracle};
use sluice_tests::{Cluster, QueryState, READY_TIMEOUT, test_rng};

use super::nexmark::{generate, parquet_rows, source};

const EVENTS: u64 = 60_000;
const EVENTS_PER_SECOND: u64 = 6_000;

/// A query of the test: its SQL as Sluice runs it, the oracle's SQL
/// (DataFusion has no `window`), its tables, its mode, and the key of an
/// update-mode one.
struct Case {
    name: &'static str,
    sql: &'static str,
    oracle: &'static str,
    tables: &'static [&'static str],
    mode: &'static str,
    keys: &'static [&'static str],
    /// The count column whose 0 says an update-mode group was left
    /// empty (an aggregation of changes): such a group is not the
    /// oracle's.
    emptied: Option<&'static str>,
}

const CASES: [Case; 6] = [
    // The most bids any auction had in each 2-second window.
    Case {
        name: "max-of-counts",
        sql: "SELECT w, max(num) AS maxn, count(*) AS auctions FROM \
              (SELECT auction, count(*) AS num, window(date_time, '2 seconds') AS w \
               FROM bid GROUP BY auction, window(date_time, '2 seconds')) \
              GROUP BY w",
        oracle: "SELECT w, max(num) AS maxn, count(*) AS auctions FROM \
              (SELECT auction, count(*) AS num, named_struct('start', date_bin(INTERVAL '2 seconds', date_time), \
               'end', date_bin(INTERVAL '2 seconds', date_time) + INTERVAL '2 seconds') AS w \
               FROM bid GROUP BY auction, 3) \
              GROUP BY w",
        tables: &["bid"],
        mode: "append",
        keys: &[],
        emptied: None,
    },
    // Nexmark q9: each auction's highest bid while it was open (its order
    // made total: a tie goes to the earlier bid, then the lower bidder).
    Case {
        name: "q9",
        sql: Q9,
        oracle: Q9,
        tables: &["auction", "bid"],
        mode: "update",
        keys: &["id"],
        emptied: None,
    },
    // q7's shape: the bids at the highest price of the 2-second window
    // before them.
    Case {
        name: "highest-bid",
        sql: HIGHEST,
        oracle: HIGHEST,
        tables: &["bid"],
        mode: "append",
        keys: &[],
        emptied: None,
    },
    // The bids each seller's auctions received per category, counted.
    Case {
        name: "join-count",
        sql: JOIN_COUNT,
        oracle: JOIN_COUNT,
        tables: &["auction", "bid"],
        mode: "update",
        keys: &["category"],
        emptied: None,
    },
    // How many auctions have had each number of bids: as an auction's
    // count grows it leaves one group for another, and a group it left
    // can be left empty.
    Case {
        name: "histogram",
        sql: HISTOGRAM,
        oracle: HISTOGRAM,
        tables: &["bid"],
        mode: "update",
        keys: &["num"],
        emptied: Some("auctions"),
    },
    // The largest and the mean of the auctions' bid counts, in complete
    // mode: a `max` and an `avg` that retract a count as it grows.
    Case {
        name: "count-stats",
        sql: COUNT_STATS,
        oracle: COUNT_STATS,
        tables: &["bid"],
        mode: "complete",
        keys: &[],
        emptied: None,
    },
];

const HISTOGRAM: &str = "SELECT num, count(*) AS auctions FROM \
    (SELECT auction, count(*) AS num FROM bid GROUP BY auction) GROUP BY num";

const COUNT_STATS: &str = "SELECT max(num) AS most, avg(num) AS mean, count(*) AS auctions FROM \
    (SELECT auction, count(*) AS num FROM bid GROUP BY auction)";

const Q9: &str = "SELECT id, item_name, initial_bid, reserve, date_time, expires, seller, category, \
    auction, bidder, price, bid_date_time FROM \
    (SELECT A.id, A.item_name, A.initial_bid, A.reserve, A.date_time, A.expires, A.seller, A.category, \
     B.auction, B.bidder, B.price, B.date_time AS bid_date_time, \
     ROW_NUMBER() OVER (PARTITION BY A.id ORDER BY B.price DESC, B.date_time ASC, B.bidder ASC) AS rownum \
     FROM auction A, bid B \
     WHERE A.id = B.auction AND B.date_time BETWEEN A.date_time AND A.expires) \
    WHERE rownum <= 1";

const HIGHEST: &str = "SELECT B.auction, B.price, B.bidder, B.date_time FROM bid B \
    JOIN (SELECT max(price) AS maxprice, date_bin(INTERVAL '2 seconds', date_time) + INTERVAL '2 seconds' AS wend \
          FROM bid GROUP BY date_bin(INTERVAL '2 seconds', date_time)) B1 \
    ON B.price = B1.maxprice \
    WHERE B.date_time BETWEEN B1.wend - INTERVAL '2 seconds' AND B1.wend";

const JOIN_COUNT: &str = "SELECT A.category, count(*) AS bids, max(B.price) AS top FROM auction A \
    JOIN bid B ON A.id = B.auction GROUP BY A.category";

fn spec(case: &Case, sink: &std::path::Path) -> String {
    let mut text = format!("name: {}\nsources:\n", case.name);
    for t in case.tables {
        text += &format!("  {t}: {}\n", source(t, EVENTS_PER_SECOND, EVENTS, 3));
    }
    text += "watermarks:\n";
    for t in case.tables {
        text += &format!("  {t}: {{column: date_time, delay_ms: 0}}\n");
    }
    text + &format!(
        "output_mode: {}\nmax_rows_per_batch: 3000\nstate_partitions: 3\ntrigger:\n  interval_ms: 0\nsink:\n  files:\n    path: {}\nsql: {:?}\n",
        case.mode,
        sink.display(),
        case.sql
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chained_operators_equal_the_oracle_through_driver_and_executor_kills() {
    let mut rng = test_rng();
    let cluster = Cluster::new("chains");
    let driver = cluster.start_driver();
    driver.wait_ready(READY_TIMEOUT).await;
    let drivers = driver.addr().to_string();
    let victim = cluster.start_executor(&drivers);
    let _survivor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    for case in &CASES {
        let text = spec(case, &cluster.sink_path(case.name));
        client
            .submit(&text)
            .await
            .unwrap_or_else(|e| panic!("{}: submit refused: {e}\n{text}", case.name));
    }
    let first = CASES[0].name;
    client
        .wait_committed(first, 1, Duration::from_secs(60))
        .await;
    tokio::time::sleep(rng.millis(0, 1500)).await;
    driver.kill();
    tokio::time::sleep(rng.millis(0, 300)).await;
    driver.restart_ready().await;
    let done = client
        .wait_committed(first, 0, Duration::from_secs(60))
        .await;
    client
        .wait_committed(first, done + 1, Duration::from_secs(60))
        .await;
    tokio::time::sleep(rng.millis(0, 1000)).await;
    victim.kill();
    tokio::time::sleep(rng.millis(0, 300)).await;
    victim.restart();

    let mut tables = Vec::new();
    for table in ["bid", "auction"] {
        let dir = cluster.root().join(format!("oracle-{table}"));
        generate(&dir, table, EVENTS, EVENTS_PER_SECOND, "parquet").await;
        tables.push((table, parquet_rows(&dir)));
    }
    for case in &CASES {
        let status = client
            .wait_state(case.name, QueryState::Finished, Duration::from_secs(180))
            .await;
        assert!(status.error.is_empty(), "{}: {status:#?}", case.name);
        let sink = cluster.sink_path(case.name);
        if case.mode == "append" {
            let want = expected_with(case.oracle, Vec::new(), &tables).await;
            let got = committed(&sink).await;
            eprintln!("{}: {} rows", case.name, want.len());
            assert!(!want.is_empty(), "{}: the oracle has rows", case.name);
            assert_eq!(got.len(), want.len(), "{}: row counts differ", case.name);
            assert!(
                got == want,
                "{}: the sink differs from the oracle",
                case.name
            );
            continue;
        }
        let want = oracle(case.oracle, Vec::new(), &tables).await;
        let mut batches = batches(&sink).await;
        eprintln!("{}: {} groups", case.name, want.len());
        if let Some(count) = case.emptied {
            // A group's latest row with a count of 0 (as the sink
            // normalizes it) says it was left
            // empty: a group the oracle has not.
            let wanted: Vec<String> = want.iter().map(|r| key_of(r, case.keys)).collect();
            let emptied = latest(&batches, case.keys)
                .into_iter()
                .filter(|r| json(r)[count] == "0")
                .map(|r| key_of(&r, case.keys))
                .collect::<Vec<_>>();
            for key in &emptied {
                assert!(
                    !wanted.contains(key),
                    "{}: group {key} is empty in the sink, not in the oracle",
                    case.name
                );
            }
            for rows in batches.values_mut() {
                rows.retain(|r| !emptied.contains(&key_of(r, case.keys)));
            }
            eprintln!("{}: {} groups left empty", case.name, emptied.len());
        }
        assert_matches(case.name, case.mode, &batches, case.keys, &want);
    }
    assert_eq!(driver.starts(), 2, "the driver ran twice");
    assert_eq!(victim.starts(), 2, "the executor ran twice");
}

fn json(row: &str) -> serde_json::Value {
    serde_json::from_str(row).expect("a JSON row")
}

const RPS: u64 = 20_000;
const TOTAL: u64 = 60_000;

/// Per 100 ms window, the most rows of any of 10 keys: two windowed
/// aggregations in a row, over 3 s of event time.
const MAX_OF_WINDOWS: &str = "SELECT w, max(n) AS maxn, count(*) AS keys FROM \
    (SELECT value % 10 AS k, count(*) AS n, window(timestamp_ms, '100 milliseconds') AS w \
     FROM input GROUP BY value % 10, window(timestamp_ms, '100 milliseconds')) GROUP BY w";
const MAX_OF_WINDOWS_ORACLE: &str = "SELECT w, max(n) AS maxn, count(*) AS keys FROM \
    (SELECT value % 10 AS k, count(*) AS n, named_struct('start', date_bin(INTERVAL '100 milliseconds', timestamp_ms), \
     'end', date_bin(INTERVAL '100 milliseconds', timestamp_ms) + INTERVAL '100 milliseconds') AS w \
     FROM input GROUP BY 1, 3) GROUP BY w";

/// Each 100 ms window's highest value joined back to its row: an
/// aggregation feeding a join, whose bound is on the window's end.
const HIGHEST_OF_WINDOWS: &str = "SELECT B.value, B.timestamp_ms, B1.wend FROM input B \
    JOIN (SELECT max(value) AS top, date_bin(INTERVAL '100 milliseconds', timestamp_ms) + INTERVAL '100 milliseconds' AS wend \
          FROM input GROUP BY date_bin(INTERVAL '100 milliseconds', timestamp_ms)) B1 \
    ON B.value = B1.top \
    WHERE B.timestamp_ms BETWEEN B1.wend - INTERVAL '100 milliseconds' AND B1.wend";

/// Waits for `name` to finish; the most state rows any of its batches
/// left.
async fn peak_state(client: &mut sluice_tests::Client, name: &str) -> u64 {
    let status = client
        .wait_state(name, QueryState::Finished, Duration::from_secs(120))
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let progress = client.progress(name).await.expect("progress");
    assert_eq!(progress.len() as i64, status.last_committed_batch + 1);
    progress
        .iter()
        .map(|p| p.state_rows_total)
        .max()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_windowed_aggregations_keeps_its_state_bounded() {
    let cluster = Cluster::new("chain-bounded");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _executor = cluster.start_executor(&drivers);
    let mut client = cluster.client(&drivers);
    let sink = cluster.sink_path("windows");
    let spec = sluice_tests::stateful::rate_spec(
        "windows",
        &sink,
        (RPS, TOTAL),
        MAX_OF_WINDOWS,
        &["output_mode: append"],
    );
    client.submit(&spec).await.expect("submit");
    let highest = cluster.sink_path("highest");
    let spec = sluice_tests::stateful::rate_spec(
        "highest",
        &highest,
        (RPS, TOTAL),
        HIGHEST_OF_WINDOWS,
        &["output_mode: append"],
    );
    client.submit(&spec).await.expect("submit");
    let most_state = peak_state(&mut client, "windows").await;
    let status = client.get("windows").await.unwrap();
    assert!(
        status.last_committed_batch >= 10,
        "many batches: {status:#?}"
    );
    // Each window once, final, equal to the oracle's.
    sluice_tests::stateful::assert_append(
        &cluster.checkpoint_root(),
        "windows",
        &sink,
        MAX_OF_WINDOWS_ORACLE,
        (RPS, TOTAL),
        &["w"],
    )
    .await;
    // 300 groups of the first aggregation and 30 windows of the second
    // went through the state, a few windows at a time.
    assert!(
        most_state > 0 && most_state <= 100,
        "state rows peaked at {most_state}"
    );
    let end = client
        .get("windows")
        .await
        .unwrap()
        .latest_progress
        .unwrap();
    assert_eq!(
        end.state_rows_total, 0,
        "the end of input lets every window go: {end:?}"
    );

    // The join lets a row go once the watermark passes its bound, on both
    // sides: the window end on one, the stream's event time on the other.
    let most_join = peak_state(&mut client, "highest").await;
    let input = rate_input(
        rate_start_ms(&cluster.checkpoint_root(), "highest"),
        RPS,
        TOTAL,
    );
    let want = expected_with(HIGHEST_OF_WINDOWS, input, &[]).await;
    assert!(want.len() >= 30, "a row per window: {}", want.len());
    assert_eq!(committed(&highest).await, want);
    eprintln!("the join's state peaked at {most_join} rows");
    assert!(
        most_join > 0 && most_join <= TOTAL / 4,
        "the join's state peaked at {most_join} rows of {TOTAL}"
    );
}
