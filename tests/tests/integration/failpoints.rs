//! The driver's failpoints over its HTTP port (debug builds), on a driver
//! with `--auth-tokens`: only an admin arms, disarms or reads them; an
//! unknown name is refused naming the known points, a body other than `on`
//! or `off` naming the point.

use std::time::Duration;

use sluice_tests::secure::ALL;
use sluice_tests::{Cluster, Pki, http};

const T: Duration = Duration::from_secs(10);
const PATH: &str = "/debug/failpoints/kafka-prepared";

async fn put(addr: &str, headers: &[(&str, &str)], body: &str) -> (u16, Vec<u8>) {
    let put = http::request_with(addr, "PUT", PATH, headers, body, T).await;
    put.expect("PUT a failpoint")
}

fn text(response: &[u8]) -> String {
    String::from_utf8_lossy(http::body(response)).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_controls_the_failpoints() {
    let cluster = Cluster::new("failpoints");
    let pki = Pki::init(&cluster);
    let driver = pki.start_ready_driver(&cluster, ALL).await;
    let addr = driver.http_addr();
    let bearer = |role: &str| format!("Bearer {}", pki.token(role));
    let (admin, viewer) = (bearer("admin"), bearer("viewer"));
    let as_admin = [("authorization", admin.as_str())];

    let (code, r) = put(addr, &[], "on").await;
    assert_eq!(code, 401, "{}", text(&r));
    let (code, r) = http::get(addr, PATH, T).await.unwrap();
    assert_eq!(code, 401, "{}", text(&r));
    let as_viewer = [("authorization", viewer.as_str())];
    let (code, r) = put(addr, &as_viewer, "on").await;
    assert_eq!(code, 403, "{}", text(&r));
    let (code, r) = http::get_with(addr, PATH, &as_viewer, T).await.unwrap();
    assert_eq!(code, 403, "{}", text(&r));

    let (code, r) = put(addr, &as_admin, "on").await;
    assert_eq!(code, 200, "{}", text(&r));
    let (code, r) = http::get_with(addr, PATH, &as_admin, T).await.unwrap();
    assert_eq!(code, 200, "{}", text(&r));
    let status: serde_json::Value = serde_json::from_str(&text(&r)).expect("JSON");
    assert_eq!(status, serde_json::json!({ "armed": true, "hits": [] }));
    let (code, r) = put(addr, &as_admin, "off").await;
    assert_eq!(code, 200, "{}", text(&r));
    assert!(text(&r).contains(r#""armed":false"#), "{}", text(&r));

    let (code, r) = put(addr, &as_admin, "maybe").await;
    assert_eq!(code, 400, "{}", text(&r));
    assert!(
        text(&r).contains("failpoint kafka-prepared: the body must be `on` or `off`"),
        "{}",
        text(&r)
    );
    let unknown = "/debug/failpoints/kafka-prepare";
    let (code, r) = http::get_with(addr, unknown, &as_admin, T).await.unwrap();
    assert_eq!(code, 404, "{}", text(&r));
    assert!(
        text(&r).contains(
            "kafka-prepared, kafka-committed, revoke-live-leader, delta-prepared, delta-committed, sink-committed, iceberg-prepared"
        ),
        "{}",
        text(&r)
    );
}
