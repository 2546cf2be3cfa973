//! The election value: what a candidate publishes under the election key,
//! and what the others read back from it.

/// A candidate's election value: its gRPC address, then the URL of its web
/// UI when it serves one, after a space (addresses and URLs have none).
pub(super) fn election_value(grpc: &str, ui: Option<&str>) -> String {
    match ui {
        Some(ui) => format!("{grpc} {ui}"),
        None => grpc.to_string(),
    }
}

/// The gRPC address and UI URL in an election value.
pub(super) fn parse_election_value(value: &str) -> (String, Option<String>) {
    match value.trim().split_once(' ') {
        Some((grpc, ui)) => (grpc.to_string(), Some(ui.trim().to_string())),
        None => (value.trim().to_string(), None),
    }
}

#[cfg(test)]
mod tests {
    use super::{election_value, parse_election_value};

    #[test]
    fn an_election_value_carries_the_ui_url_when_there_is_one() {
        let v = election_value("10.0.0.1:7070", Some("http://10.0.0.1:7071"));
        assert_eq!(
            parse_election_value(&v),
            ("10.0.0.1:7070".into(), Some("http://10.0.0.1:7071".into()))
        );
        let v = election_value("driver-0:7070", None);
        assert_eq!(v, "driver-0:7070");
        assert_eq!(parse_election_value(&v), ("driver-0:7070".into(), None));
    }
}
