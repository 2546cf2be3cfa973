//! The driver's failpoints over its HTTP port (debug builds), on a driver
//! with `--auth-tokens`: only an admin arms, disarms or reads them; an
//! unknown name is refused naming the known points, a body other than `on`
//! or `off` naming the point.

use std::time::Duration;

use sluice_tests::secure::ALL;
use sluice_tests::{Cluster, DriverOpts, Pki, READY_TIMEOUT, http};

const T: Duration = Duration::from_secs(10);
const PATH: &str = "/debug/failpoints/kafka-prepared";

fn text(response: &[u8]) -> String {
    String::from_utf8_lossy(http::body(response)).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_an_admin_controls_the_failpoints() {
    let cluster = Cluster::new("failpoints");
    let pki = Pki::init(&cluster);
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(ALL),
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let addr = driver.http_addr();
    let bearer = |role: &str| format!("Bearer {}", pki.token(role));
    let (admin, viewer) = (bearer("admin"), bearer("viewer"));
    let as_admin = [("authorization", admin.as_str())];

    let (code, r) = http::put(addr, PATH, &[], "on", T).await.unwrap();
    assert_eq!(code, 401, "{}", text(&r));
    let (code, r) = http::get(addr, PATH, T).await.unwrap();
    assert_eq!(code, 401, "{}", text(&r));
    let as_viewer = [("authorization", viewer.as_str())];
    let (code, r) = http::put(addr, PATH, &as_viewer, "on", T).await.unwrap();
    assert_eq!(code, 403, "{}", text(&r));
    let (code, r) = http::get_with(addr, PATH, &as_viewer, T).await.unwrap();
    assert_eq!(code, 403, "{}", text(&r));

    let (code, r) = http::put(addr, PATH, &as_admin, "on", T).await.unwrap();
    assert_eq!(code, 200, "{}", text(&r));
    let (code, r) = http::get_with(addr, PATH, &as_admin, T).await.unwrap();
    assert_eq!(code, 200, "{}", text(&r));
    let status: serde_json::Value = serde_json::from_str(&text(&r)).expect("JSON");
    assert_eq!(status, serde_json::json!({ "armed": true, "hits": [] }));
    let (code, r) = http::put(addr, PATH, &as_admin, "off", T).await.unwrap();
    assert_eq!(code, 200, "{}", text(&r));
    assert!(text(&r).contains(r#""armed":false"#), "{}", text(&r));

    let (code, r) = http::put(addr, PATH, &as_admin, "maybe", T).await.unwrap();
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
        text(&r).contains("kafka-prepared, kafka-committed, revoke-live-leader"),
        "{}",
        text(&r)
    );
}
