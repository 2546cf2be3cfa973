//! The schema a source's kind fixes before any data is read.
//!
//! Downstream of [`crate::spec`], [`crate::rate`] and [`crate::nexmark`]:
//! the generators own their schemas and the spec owns Kafka's `format`,
//! so the one match over the source kinds that needs all three lives here
//! rather than in `spec`, which the generators themselves import.

use arrow_schema::SchemaRef;

use crate::error::Result;
use crate::spec::SourceSpec;

/// The schema `source`'s kind fixes (rate, Nexmark, Kafka's `format`);
/// `None` for a source whose schema is resolved at submit and recorded in
/// the query's checkpoint (a file source's `sources/schema`).
pub fn fixed(source: &SourceSpec) -> Result<Option<SchemaRef>> {
    Ok(match source {
        SourceSpec::Rate(_) => Some(crate::rate::schema()),
        SourceSpec::Nexmark(n) => Some(crate::nexmark::schema(n.table)),
        SourceSpec::Kafka(k) => Some(k.schema()?),
        SourceSpec::Files(_) => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(json: &str) -> SourceSpec {
        serde_json::from_str(json).expect("a valid source")
    }

    #[test]
    fn generators_fix_their_schema_and_files_defer_to_the_checkpoint() {
        let bids =
            source(r#"{"nexmark": {"table": "bid", "events_per_second": 10, "partitions": 1}}"#);
        let schema = fixed(&bids).unwrap().expect("Nexmark fixes its schema");
        assert_eq!(
            schema,
            crate::nexmark::schema(crate::spec::NexmarkTable::Bid)
        );
        let rate = source(r#"{"rate": {"rows_per_second": 10, "partitions": 1}}"#);
        assert_eq!(fixed(&rate).unwrap(), Some(crate::rate::schema()));
        let files = source(r#"{"files": {"path": "/in", "format": "parquet"}}"#);
        assert!(fixed(&files).unwrap().is_none());
    }
}
