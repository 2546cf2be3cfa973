//! The leader hint: a standby answers `UNAVAILABLE` with the leader's
//! address in the `sluice-leader` response metadata. The driver writes it
//! here, and the executor, the CLI and the test client read it here.

use tonic::{Code, Status};

/// Response metadata key that carries the leader's address on a standby.
pub const LEADER_METADATA_KEY: &str = "sluice-leader";

/// Puts `leader` into `status` as the hint. An address that cannot be a
/// metadata value (it never is one for a valid `host:port`) is left out.
pub fn set_leader_hint(status: &mut Status, leader: &str) {
    if let Ok(v) = leader.parse() {
        status.metadata_mut().insert(LEADER_METADATA_KEY, v);
    }
}

/// The leader's address from a standby's `UNAVAILABLE` status, as
/// `host:port`: trimmed, without an `http://` or `https://` scheme or a
/// trailing `/`. `None` for any other status, or a missing or blank hint.
pub fn leader_hint(status: &Status) -> Option<String> {
    if status.code() != Code::Unavailable {
        return None;
    }
    let value = status.metadata().get(LEADER_METADATA_KEY)?.to_str().ok()?;
    let value = value.trim();
    let value = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .unwrap_or(value)
        .trim_end_matches('/');
    (!value.is_empty()).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn standby(hint: &str) -> Status {
        let mut s = Status::unavailable("not the leader");
        s.metadata_mut()
            .insert(LEADER_METADATA_KEY, hint.parse().unwrap());
        s
    }

    #[test]
    fn the_hint_is_read_from_an_unavailable_status() {
        assert_eq!(leader_hint(&Status::unavailable("x")), None);
        assert_eq!(
            leader_hint(&standby("10.0.0.5:7070")).as_deref(),
            Some("10.0.0.5:7070")
        );
        assert_eq!(
            leader_hint(&standby(" http://driver-1:7070/ ")).as_deref(),
            Some("driver-1:7070")
        );
        assert_eq!(leader_hint(&standby("")), None);
        let mut other = Status::internal("boom");
        set_leader_hint(&mut other, "x:1");
        assert_eq!(leader_hint(&other), None, "only UNAVAILABLE carries a hint");
    }

    #[test]
    fn a_written_hint_reads_back() {
        let mut s = Status::unavailable("not the leader");
        set_leader_hint(&mut s, "127.0.0.1:7070");
        assert_eq!(leader_hint(&s).as_deref(), Some("127.0.0.1:7070"));
    }
}
