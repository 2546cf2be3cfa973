//! Pure decisions of the client: which failures are worth retrying, driver
//! address forms and the backoff schedule.

use std::time::Duration;

use sluice_common::backoff::Backoff;
use tonic::Code;

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

/// `host:port` → `<scheme>://host:port`; a URL with a scheme is kept as is.
pub fn endpoint_uri(addr: &str, scheme: &str) -> String {
    if addr.contains("://") {
        addr.to_string()
    } else {
        format!("{scheme}://{addr}")
    }
}

/// Between retries: 50 ms doubling, at most 1 s.
pub const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));

#[cfg(test)]
mod tests {
    use super::*;

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
    fn addresses() {
        assert_eq!(
            parse_addrs(&["a:1, b:2", "", "c:3"]),
            vec!["a:1", "b:2", "c:3"]
        );
        assert_eq!(endpoint_uri("a:1", "http"), "http://a:1");
        assert_eq!(endpoint_uri("a:1", "https"), "https://a:1");
        assert_eq!(endpoint_uri("https://a:1", "http"), "https://a:1");
    }
}
