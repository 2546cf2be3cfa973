//! The web UI of a driver with `--auth-tokens`: pages need a viewer or
//! admin token, kept in an HttpOnly cookie by the sign-in form; a viewer
//! reads but may not stop a query; an admin may. Checked over HTTP and in
//! headless Chromium (the sign-in form and the viewer's query page).

use std::time::Duration;

use sluice_tests::browser::Browser;
use sluice_tests::secure::ALL;
use sluice_tests::{Cluster, DriverOpts, Pki, QueryState, READY_TIMEOUT, Spec, http};

const T: Duration = Duration::from_secs(10);
const WAIT: Duration = Duration::from_secs(60);

fn text(response: &[u8]) -> String {
    String::from_utf8_lossy(response).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ui_needs_a_token_and_a_role() {
    let cluster = Cluster::new("web-ui-auth");
    let pki = Pki::init(&cluster);
    let driver = cluster.start_driver_with(DriverOpts {
        extra_args: pki.driver_args(ALL),
        ..Default::default()
    });
    driver.wait_ready(READY_TIMEOUT).await;
    let admin = pki.token("admin");
    let viewer = pki.token("viewer");
    let spec = Spec::new("guarded", &cluster.sink_path("guarded"))
        .rows_per_second(10)
        .to_yaml();
    let mut client = sluice_tests::Client::secured(driver.addr(), &pki.client_tls(), Some(&admin));
    client.submit(&spec).await.expect("submit");
    let addr = driver.http_addr();

    // The page itself carries no data; the data needs a token.
    let (code, _) = http::get(addr, "/", T).await.unwrap();
    assert_eq!(code, 200);
    let (code, r) = http::get(addr, "/ui/api/overview", T).await.unwrap();
    assert_eq!(code, 401, "{}", text(&r));
    assert!(text(&r).contains("requires a token"), "{}", text(&r));
    // The event stream says why, then ends.
    let (code, r) = http::get(addr, "/ui/events", T).await.unwrap();
    let r = text(&r);
    assert_eq!(code, 200);
    assert!(
        r.contains("event: error") && r.contains("requires a token"),
        "{r}"
    );

    // Signing in: an unknown token, an executor's, then a viewer's.
    let login = |token: String| async move {
        http::post_json(addr, "/ui/api/login", &[], &token, T)
            .await
            .unwrap()
    };
    let (code, r) = login("not-a-token".into()).await;
    assert_eq!(code, 401, "{}", text(&r));
    let (code, r) = login(pki.token("executor")).await;
    assert_eq!(code, 403, "{}", text(&r));
    assert!(text(&r).contains("has the role executor"), "{}", text(&r));
    let (code, r) = login(viewer.clone()).await;
    assert_eq!(code, 200, "{}", text(&r));
    let set_cookie = text(&r)
        .lines()
        .find(|l| l.to_ascii_lowercase().starts_with("set-cookie:"))
        .expect("a session cookie")
        .to_string();
    assert!(
        set_cookie.contains(&format!("sluice_ui={viewer};")),
        "{set_cookie}"
    );
    assert!(
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    let cookie = format!("sluice_ui={viewer}");

    // A viewer reads, and may not stop.
    let (code, r) = http::get_with(addr, "/ui/api/overview", &[("cookie", &cookie)], T)
        .await
        .unwrap();
    assert_eq!(code, 200, "{}", text(&r));
    let body: serde_json::Value = serde_json::from_slice(http::body(&r)).unwrap();
    assert_eq!(body["access"], "viewer");
    assert_eq!(body["queries"][0]["name"], "guarded");
    let (code, r) = http::post_json(
        addr,
        "/ui/api/queries/guarded/stop",
        &[("cookie", &cookie)],
        "",
        T,
    )
    .await
    .unwrap();
    assert_eq!(code, 403, "{}", text(&r));
    assert!(text(&r).contains("this needs admin"), "{}", text(&r));
    assert_eq!(
        client.get("guarded").await.unwrap().state,
        QueryState::Running as i32
    );

    // In the browser: the sign-in form, then the viewer's query page.
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("web_ui");
    let ui = format!("http://{addr}");
    let v = viewer.clone();
    tokio::task::spawn_blocking(move || {
        let b = Browser::start();
        b.goto(&format!("{ui}/"));
        b.wait_for("the sign-in form", "document.getElementById('token') !== null", WAIT);
        b.screenshot(&shots.join("sign-in.png"));
        b.run("document.getElementById('token').value = 'wrong'; document.getElementById('login').requestSubmit()");
        b.wait_for("the refusal", "document.getElementById('login-error').textContent", WAIT);
        assert_eq!(b.text("#login-error"), "the token is not valid for this driver");
        b.run(&format!("document.getElementById('token').value = '{v}'; document.getElementById('login').requestSubmit()"));
        b.wait_for("the queries table", "document.querySelector('tr[data-query=\"guarded\"]') !== null", WAIT);
        assert_eq!(b.eval("document.cookie"), serde_json::json!(""), "the cookie is HttpOnly");
        b.run("location.hash = '#/query/guarded'");
        b.wait_for("the query page", "document.getElementById('q-state')?.textContent === 'RUNNING'", WAIT);
        std::thread::sleep(Duration::from_millis(1500));
        assert_eq!(b.eval("document.getElementById('stop').hidden"), serde_json::json!(true), "no stop button for a viewer");
    })
    .await
    .expect("the browser checks");

    // An admin stops it.
    let bearer = format!("Bearer {admin}");
    let (code, r) = http::post_json(
        addr,
        "/ui/api/queries/guarded/stop",
        &[("authorization", &bearer)],
        "",
        T,
    )
    .await
    .unwrap();
    assert_eq!(code, 200, "{}", text(&r));
    assert_eq!(
        client.get("guarded").await.unwrap().state,
        QueryState::Stopped as i32
    );
}
