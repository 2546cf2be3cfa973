//! A test run inside a network namespace of its own: a fresh loopback, and
//! nftables rules that apply to nothing else on the machine (root only; the
//! test command installs `unshare`, `ip` and `nft`).
//!
//! ```text
//!  test (outside) ── unshare --net ── sh: ip link set lo up ── the same test binary, that test only
//!                                                              (SLUICE_TEST_NETNS=1: runs the body)
//! ```
//! Every process the inner test starts lives in the namespace, and the
//! namespace goes away with its last process.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const INSIDE: &str = "SLUICE_TEST_NETNS";

/// True inside the namespace: run the test's body. Outside, runs the test
/// `name` of this binary inside a new namespace, passes its output
/// through, fails if it fails or outlasts `limit` (then it is killed), and
/// returns false.
///
/// `name` is the test's full name in its binary, with its module path
/// (`chaos_firewalled::firewalled_leader_is_not_revoked`): a name that
/// matches no test fails here, rather than running nothing and passing.
pub fn enter(name: &str, limit: Duration) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let listed = Command::new(&exe)
        .args([name, "--exact", "--list", "--format", "terse"])
        .stdin(Stdio::null())
        .output()
        .expect("list the tests of this binary");
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.lines().any(|l| l == format!("{name}: test")),
        "{name:?} is not the full name of a test of {}: {listed}",
        exe.display()
    );
    let mut child = Command::new("unshare")
        .args(["--net", "--kill-child", "--", "sh", "-c"])
        .arg(r#"ip link set lo up && exec "$@""#)
        .arg("sh")
        .arg(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .stdin(Stdio::null())
        .spawn()
        .expect("unshare runs (scripts/deps.sh test installs it)");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the namespaced test") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} in its network namespace took longer than {limit:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        status.success(),
        "{name} failed in its network namespace: {status}"
    );
    false
}

/// The nftables table of [`drop_port`].
const TABLE: &str = "sluice_test";

/// Drops every TCP packet to `port` in this namespace: connections to it
/// time out instead of being refused, and open ones go silent.
pub fn drop_port(port: u16) {
    let rules = format!(
        "table inet {TABLE} {{\n  chain input {{\n    type filter hook input priority 0; policy accept;\n    tcp dport {port} drop\n  }}\n}}\n"
    );
    nft(&["-f", "-"], Some(&rules));
}

/// Removes the rules of [`drop_port`].
pub fn allow_all() {
    nft(&["delete", "table", "inet", TABLE], None);
}

fn nft(args: &[&str], input: Option<&str>) {
    use std::io::Write;
    assert!(
        std::env::var_os(INSIDE).is_some(),
        "firewall rules only inside a test's own network namespace"
    );
    let mut child = Command::new("nft")
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .expect("nft runs (scripts/deps.sh test installs it)");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("piped")
            .write_all(input.as_bytes())
            .expect("write the rules to nft");
    }
    let status = child.wait().expect("nft");
    assert!(status.success(), "nft {args:?} failed: {status}");
}
