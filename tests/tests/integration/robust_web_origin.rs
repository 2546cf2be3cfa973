//! The HTTP port refuses what a hostile page could make a browser send: a
//! request that changes something from another site's page (CSRF), and
//! any request for a host name the driver does not serve (DNS rebinding),
//! while the UI's own pages and tools without those headers work.

use std::time::Duration;

use sluice_tests::http::{get_with, post_json};
use sluice_tests::{Cluster, QueryState, Spec};

const T: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_site_changes_and_foreign_hosts_are_refused() {
    let cluster = Cluster::new("web-origin");
    let driver = cluster.start_ready_driver().await;
    let drivers = driver.addr().to_string();
    let http = driver.http_addr().to_string();
    let mut client = cluster.client(&drivers);
    let spec = Spec::new("q", &cluster.sink_path("q"));
    client.submit(&spec.to_yaml()).await.expect("submit");
    let stop = "/ui/api/queries/q/stop";

    for forged in [
        [("Origin", "http://evil.example")],
        [("Sec-Fetch-Site", "cross-site")],
        [("Origin", "null")],
    ] {
        let (code, _) = post_json(&http, stop, &forged, "", T).await.unwrap();
        assert_eq!(code, 403, "{forged:?}");
    }
    let status = client.get("q").await.expect("get");
    assert_eq!(status.state, QueryState::Running as i32, "{status:#?}");

    for path in ["/", "/ui/api/overview", "/metrics"] {
        let (code, body) = get_with(&http, path, &[("Host", "evil.example:7071")], T)
            .await
            .unwrap();
        assert_eq!(code, 421, "{path}");
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("--http-allowed-hosts"), "{path}: {body}");
    }
    let (code, _) = get_with(&http, "/ui/api/overview", &[("Host", "localhost")], T)
        .await
        .unwrap();
    assert_eq!(code, 200);

    let own = format!("http://{http}");
    let (code, _) = post_json(&http, stop, &[("Origin", own.as_str())], "", T)
        .await
        .unwrap();
    assert_eq!(code, 200, "the UI's own page stops the query");
    let status = client.get("q").await.expect("get");
    assert_eq!(status.state, QueryState::Stopped as i32, "{status:#?}");
}
