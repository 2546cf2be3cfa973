//! The web UI of a driver with `--auth-tokens`: pages need a viewer or
//! admin token; signing in opens a session whose random id (never the
//! token) the HttpOnly cookie holds, ended by signing out and by the
//! token's removal from the token file; a viewer
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
        set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"),
        "{set_cookie}"
    );
    // The cookie holds a session id, never the token.
    assert!(!set_cookie.contains(&viewer), "{set_cookie}");
    let session = set_cookie
        .split("sluice_ui=")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .expect("a sluice_ui cookie")
        .to_string();
    let cookie = format!("sluice_ui={session}");
    let forged = format!("sluice_ui={viewer}");
    let (code, _) = http::get_with(addr, "/ui/api/overview", &[("cookie", &forged)], T)
        .await
        .unwrap();
    assert_eq!(code, 401, "a token in the cookie is no session");

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

    // Signing out ends the session; so does removing its token.
    let overview = |cookie: String| async move {
        http::get_with(addr, "/ui/api/overview", &[("cookie", &cookie)], T)
            .await
            .unwrap()
            .0
    };
    http::post_json(addr, "/ui/api/logout", &[("cookie", &cookie)], "", T)
        .await
        .unwrap();
    assert_eq!(overview(cookie.clone()).await, 401, "signed out");
    let (_, r) = login(viewer.clone()).await;
    let again = text(&r)
        .split("sluice_ui=")
        .nth(1)
        .and_then(|r| r.split(';').next())
        .map(|id| format!("sluice_ui={id}"))
        .expect("a new session");
    assert_eq!(overview(again.clone()).await, 200);
    let tokens_file = pki.file("tokens.yaml");
    let original = std::fs::read_to_string(&tokens_file).unwrap();
    // Each entry is three lines: name, role, sha256.
    let lines: Vec<&str> = original.lines().collect();
    let role = lines
        .iter()
        .position(|l| l.trim() == "role: viewer")
        .expect("the viewer's entry");
    let without_viewer: String = lines
        .iter()
        .enumerate()
        .filter(|(i, _)| !(role - 1..=role + 1).contains(i))
        .map(|(_, l)| format!("{l}\n"))
        .collect();
    std::fs::write(&tokens_file, &without_viewer).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while overview(again.clone()).await != 401 {
        assert!(
            std::time::Instant::now() < deadline,
            "the removed token's session lives on"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    std::fs::write(&tokens_file, &original).unwrap();
    let deadline = std::time::Instant::now() + WAIT;
    while login(viewer.clone()).await.0 != 200 {
        assert!(
            std::time::Instant::now() < deadline,
            "the token file was not reloaded"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

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
