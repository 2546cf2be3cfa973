//! Whether the leader's process is gone, from the kernel's answers: the
//! evidence a standby needs before it revokes the leader's lease.
//!
//! ```text
//!  connect ─ refused ─► wait 20 ms ─► connect ─ refused ─► wait 20 ms ─► connect ─ refused ─► Dead
//!     └──── accepted ───────────────────┴───────────────────────────────────┴──────────────► Alive
//!     └──── timeout, unreachable, ... ──┴───────────────────────────────────┴──────────────► Inconclusive
//! ```
//! Only a refusal (a TCP RST to a SYN: nothing listens at the address)
//! counts. A timeout or an unreachable host proves nothing: a paused
//! process, a dropped packet or a partition look the same, and those are
//! left to the lease. A process that listens again within the window (a
//! restart on the same address) is alive.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// Connection attempts: the first refusal and two confirmations.
pub const PROBES: usize = 3;
/// The pause between two attempts.
pub const PROBE_GAP: Duration = Duration::from_millis(20);
/// How long one attempt may take; longer proves nothing.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(200);

/// The kernel's answer to one connection attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    Refused,
    Accepted,
    Inconclusive(io::ErrorKind),
}

/// What the attempts show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every attempt was refused.
    Dead,
    /// Something accepted a connection.
    Alive,
    /// An attempt timed out or failed otherwise: the lease decides.
    Inconclusive(io::ErrorKind),
}

/// The verdict over the answers so far: `None` while every answer was a
/// refusal but fewer than [`PROBES`] were made.
pub fn judge(probes: &[Probe]) -> Option<Verdict> {
    for p in probes {
        match p {
            Probe::Refused => {}
            Probe::Accepted => return Some(Verdict::Alive),
            Probe::Inconclusive(kind) => return Some(Verdict::Inconclusive(*kind)),
        }
    }
    (probes.len() >= PROBES).then_some(Verdict::Dead)
}

/// One connection attempt to `addr`, closed at once if accepted.
pub async fn probe(addr: SocketAddr) -> Probe {
    match tokio::time::timeout(PROBE_TIMEOUT, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_stream)) => Probe::Accepted,
        Ok(Err(e)) if e.kind() == io::ErrorKind::ConnectionRefused => Probe::Refused,
        Ok(Err(e)) => Probe::Inconclusive(e.kind()),
        Err(_) => Probe::Inconclusive(io::ErrorKind::TimedOut),
    }
}

/// The evidence about one address: the verdict, and when each refusal
/// came, from the first attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Evidence {
    pub addr: SocketAddr,
    pub verdict: Verdict,
    pub refused_at: Vec<Duration>,
}

/// Probes `addr` until the answers decide, [`PROBE_GAP`] apart.
pub async fn confirm_dead(addr: SocketAddr) -> Evidence {
    let start = Instant::now();
    let mut probes = Vec::with_capacity(PROBES);
    let mut refused_at = Vec::with_capacity(PROBES);
    loop {
        let p = probe(addr).await;
        if p == Probe::Refused {
            refused_at.push(start.elapsed());
        }
        probes.push(p);
        if let Some(verdict) = judge(&probes) {
            return Evidence {
                addr,
                verdict,
                refused_at,
            };
        }
        tokio::time::sleep(PROBE_GAP).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_refusals_all_the_way_prove_death() {
        use Probe::*;
        assert_eq!(judge(&[]), None);
        assert_eq!(judge(&[Refused, Refused]), None);
        assert_eq!(judge(&[Refused, Refused, Refused]), Some(Verdict::Dead));
        assert_eq!(judge(&[Refused, Accepted]), Some(Verdict::Alive));
        let timeout = Inconclusive(io::ErrorKind::TimedOut);
        assert_eq!(
            judge(&[Refused, timeout]),
            Some(Verdict::Inconclusive(io::ErrorKind::TimedOut))
        );
        assert_eq!(judge(&[Accepted]), Some(Verdict::Alive));
    }

    /// A loopback port with nothing listening on it.
    fn closed_port() -> SocketAddr {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    }

    #[tokio::test]
    async fn a_listening_port_is_alive() {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let e = confirm_dead(l.local_addr().unwrap()).await;
        assert_eq!(e.verdict, Verdict::Alive);
        assert!(e.refused_at.is_empty());
    }

    #[tokio::test]
    async fn a_closed_port_is_dead_after_three_refusals_apart() {
        let e = confirm_dead(closed_port()).await;
        assert_eq!(e.verdict, Verdict::Dead);
        assert_eq!(e.refused_at.len(), PROBES);
        for w in e.refused_at.windows(2) {
            assert!(w[1] - w[0] >= PROBE_GAP, "{:?}", e.refused_at);
        }
    }

    #[tokio::test]
    async fn a_process_that_listens_again_within_the_window_is_alive() {
        let addr = closed_port();
        // On this one-thread runtime the rebind's timer fires before the
        // second attempt's, whatever the load: the first attempt is refused
        // (the kernel answers within connect), the second accepted.
        let rebind = tokio::spawn(async move {
            tokio::time::sleep(PROBE_GAP / 4).await;
            let l = tokio::net::TcpListener::bind(addr).await.unwrap();
            tokio::time::sleep(Duration::from_secs(1)).await;
            drop(l);
        });
        let e = confirm_dead(addr).await;
        assert_eq!(e.verdict, Verdict::Alive, "{e:?}");
        assert!(
            !e.refused_at.is_empty(),
            "the first attempt found it down: {e:?}"
        );
        rebind.abort();
    }
}
