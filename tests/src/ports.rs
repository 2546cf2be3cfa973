//! Free TCP ports on 127.0.0.1.
//!
//! A port is picked outside the kernel's ephemeral range when possible, so
//! that no outgoing connection (an executor dialing a driver) can grab the
//! port of a driver that is down between a kill and its restart. Each port
//! is handed out at most once per test process.

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The kernel's ephemeral port range.
fn ephemeral_range() -> (u16, u16) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|p| p.parse::<u16>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32768, 60999))
}

/// Candidate ports below the ephemeral range, in a per-process order.
fn candidates() -> impl Iterator<Item = u16> {
    let (lo, _) = ephemeral_range();
    let (base, top) = (10_000u32, u32::from(lo));
    let span = top.saturating_sub(base).max(1);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mut x = u64::from(std::process::id()) << 32 | u64::from(nanos);
    (0..200).filter_map(move |_| {
        // xorshift: a cheap spread over the range.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (top > base).then(|| (base + (x % u64::from(span)) as u32) as u16)
    })
}

fn bindable(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// A port that nothing listens on now and that this process has not
/// handed out before.
pub fn free_port() -> u16 {
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    for port in candidates() {
        if !taken.contains(&port) && bindable(port) {
            taken.insert(port);
            return port;
        }
    }
    for _ in 0..100 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local_addr").port();
        drop(listener);
        if taken.insert(port) {
            return port;
        }
    }
    panic!("no free port on 127.0.0.1");
}

/// `127.0.0.1:<free port>`.
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}
