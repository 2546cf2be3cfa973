//! The stateful example of docs/stateful.md runs as written: its spec (with the sink
//! moved into the test's directory) finishes, and each window it emitted
//! holds DataFusion's one-piece result, once.

use std::time::Duration;

use sluice_tests::stateful::assert_append;
use sluice_tests::{Cluster, QueryState};

const ORACLE: &str = "SELECT named_struct('start', date_bin(INTERVAL '1 second', timestamp_ms), 'end', date_bin(INTERVAL '1 second', timestamp_ms) + INTERVAL '1 second') AS w, value % 10 AS page, count(*) AS clicks, max(value) AS last_value FROM input GROUP BY 1, 2";

/// The YAML block after docs/stateful.md's `<!-- example: windowed -->` marker.
fn example() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let page = std::fs::read_to_string(root.join("docs/stateful.md")).unwrap();
    let (_, after) = page
        .split_once("<!-- example: windowed -->\n```yaml\n")
        .expect("docs/stateful.md has the windowed example");
    after
        .split_once("```")
        .expect("the block ends")
        .0
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_windowed_example_runs() {
    let cluster = Cluster::new("readme-stateful");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let _e1 = cluster.start_executor(&drivers);
    let _e2 = cluster.start_executor(&drivers);
    let sink = cluster.sink_path("clicks-per-window");
    let spec = example().replace("/tmp/sluice-out/clicks-per-window", sink.to_str().unwrap());
    assert!(spec.contains(sink.to_str().unwrap()), "{spec}");
    let mut client = cluster.client(&drivers);
    client.submit(&spec).await.expect("the example submits");
    let status = client
        .wait_state(
            "clicks-per-window",
            QueryState::Finished,
            Duration::from_secs(120),
        )
        .await;
    assert!(status.error.is_empty(), "{status:#?}");
    let progress = client
        .progress("clicks-per-window")
        .await
        .expect("progress");
    assert!(
        progress
            .iter()
            .any(|p| p.watermark_ms.is_some() && p.state_bytes > 0),
        "{progress:?}"
    );
    let root = cluster.checkpoint_root();
    let rate = (20_000, 100_000);
    let keys = ["w", "page"];
    assert_append(&root, "clicks-per-window", &sink, ORACLE, rate, &keys).await;
}
