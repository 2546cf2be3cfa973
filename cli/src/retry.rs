//! Pure decisions of the client: which failures are worth retrying, the
//! leader hint of a standby, driver address forms and the backoff schedule.

use std::time::Duration;

use sluice_proto::LEADER_METADATA_KEY;
use tonic::Code;
use tonic::metadata::MetadataMap;

/// True when a failed call may be retried: UNAVAILABLE (a standby, a driver
/// going down, a refused connection), or a broken connection that tonic
/// reports as UNKNOWN/INTERNAL/CANCELLED with an underlying transport error.
/// A status the server sent itself has no source error and is final.
pub fn is_transport_failure(code: Code, has_source: bool) -> bool {
    match code {
        Code::Unavailable => true,
        Code::Unknown | Code::Internal | Code::Cancelled => has_source,
        _ => false,
    }
}

/// The leader address a standby put in the `sluice-leader` metadata.
pub fn leader_hint(metadata: &MetadataMap) -> Option<String> {
    let value = metadata.get(LEADER_METADATA_KEY)?.to_str().ok()?;
    let value = value.trim();
    let value = value
        .strip_prefix("http://")
        .or_else(|| value.strip_prefix("https://"))
        .unwrap_or(value)
        .trim_end_matches('/');
    (!value.is_empty()).then(|| value.to_string())
}

/// Splits `--driver a,b` values into addresses, dropping blanks.
pub fn parse_addrs<S: AsRef<str>>(values: &[S]) -> Vec<String> {
    values
        .iter()
        .flat_map(|v| v.as_ref().split(','))
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_string)
        .collect()
}

/// `host:port` → `http://host:port`; a URL with a scheme is kept as is.
pub fn endpoint_uri(addr: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    }
}

/// Backoff before retry number `attempt` (0-based): 50 ms doubling, capped at 1 s.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(50u64.saturating_mul(1 << attempt.min(5)).min(1000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leader_hint_is_parsed_from_metadata() {
        let mut md = MetadataMap::new();
        assert_eq!(leader_hint(&md), None);
        md.insert(LEADER_METADATA_KEY, "10.0.0.5:7070".parse().unwrap());
        assert_eq!(leader_hint(&md).as_deref(), Some("10.0.0.5:7070"));
        md.insert(
            LEADER_METADATA_KEY,
            " http://driver-1:7070/ ".parse().unwrap(),
        );
        assert_eq!(leader_hint(&md).as_deref(), Some("driver-1:7070"));
        md.insert(LEADER_METADATA_KEY, "".parse().unwrap());
        assert_eq!(leader_hint(&md), None);
    }

    #[test]
    fn transport_failures_are_told_apart_from_server_answers() {
        assert!(is_transport_failure(Code::Unavailable, false));
        assert!(is_transport_failure(Code::Unknown, true));
        assert!(is_transport_failure(Code::Internal, true));
        assert!(!is_transport_failure(Code::Internal, false));
        assert!(!is_transport_failure(Code::InvalidArgument, true));
        assert!(!is_transport_failure(Code::AlreadyExists, false));
    }

    #[test]
    fn addresses_and_backoff() {
        assert_eq!(
            parse_addrs(&["a:1, b:2", "", "c:3"]),
            vec!["a:1", "b:2", "c:3"]
        );
        assert_eq!(endpoint_uri("a:1"), "http://a:1");
        assert_eq!(endpoint_uri("https://a:1"), "https://a:1");
        assert_eq!(backoff(0), Duration::from_millis(50));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(30), Duration::from_millis(1000));
    }
}
