//! A query's input streams: `source:` (the one table `input`) or
//! `sources:` (several tables, by name), and each one's watermark
//! (`watermark:` for `source:`, `watermarks:` for `sources:`).

use super::{MAX_PARTITIONS, MAX_ROWS_PER_SECOND, QuerySpec, SourceSpec, WatermarkSpec};
use crate::error::{Error, Result};

/// The table name of the stream of a spec with `source:`.
pub const INPUT: &str = "input";

/// The most input streams of one query.
pub const MAX_SOURCES: usize = 16;

/// One input stream of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input<'a> {
    /// Its table name in the SQL.
    pub name: &'a str,
    pub source: &'a SourceSpec,
    pub watermark: Option<&'a WatermarkSpec>,
}

impl QuerySpec {
    /// Every input stream, in name order (`input` alone for `source:`).
    pub fn inputs(&self) -> Vec<Input<'_>> {
        match &self.source {
            Some(source) => vec![Input {
                name: INPUT,
                source,
                watermark: self.watermark.as_ref(),
            }],
            None => self
                .sources
                .iter()
                .map(|(name, source)| Input {
                    name,
                    source,
                    watermark: self.watermarks.get(name),
                })
                .collect(),
        }
    }

    /// The input stream named `name`.
    pub fn input(&self, name: &str) -> Option<Input<'_>> {
        self.inputs().into_iter().find(|i| i.name == name)
    }

    /// Whether any input has a watermark.
    pub fn has_watermark(&self) -> bool {
        self.watermark.is_some() || !self.watermarks.is_empty()
    }
}

impl Input<'_> {
    /// The spec field of its source: `source`, or `sources.<name>`.
    pub fn field(&self, source_form: bool) -> String {
        if source_form {
            "source".into()
        } else {
            format!("sources.{}", self.name)
        }
    }
}

/// Checks the inputs and their watermarks; the error names the field.
pub fn validate(spec: &QuerySpec) -> Result<()> {
    match (&spec.source, spec.sources.is_empty()) {
        (Some(_), false) => {
            return Err(Error::invalid(
                "sources",
                "a query has `source:` (the table `input`) or `sources:` (tables by name), never both",
            ));
        }
        (None, true) => {
            return Err(Error::invalid(
                "source",
                "missing; give `source:` (the table `input`) or `sources:` (tables by name)",
            ));
        }
        _ => {}
    }
    if spec.sources.len() > MAX_SOURCES {
        return Err(Error::invalid(
            "sources",
            format!("at most {MAX_SOURCES} sources, got {}", spec.sources.len()),
        ));
    }
    if let Some(s) = &spec.source {
        validate_source("source", s)?;
    }
    for (name, s) in &spec.sources {
        let field = format!("sources.{name}");
        super::validate_table_name(&field, name)?;
        if spec.tables.contains_key(name) {
            return Err(Error::invalid(
                field,
                "is also a static table under `tables:`; a name is one or the other",
            ));
        }
        validate_source(&field, s)?;
    }
    validate_watermarks(spec)?;
    if !spec.sources.is_empty() && spec.sql.is_none() {
        let names: Vec<&str> = spec.sources.keys().map(String::as_str).collect();
        return Err(Error::invalid(
            "sql",
            format!(
                "missing; a query over `sources:` reads its tables by name ({}), and there is no `input`",
                names.join(", ")
            ),
        ));
    }
    Ok(())
}

fn validate_watermarks(spec: &QuerySpec) -> Result<()> {
    if spec.source.is_some() && !spec.watermarks.is_empty() {
        return Err(Error::invalid(
            "watermarks",
            "is for `sources:`; a query with `source:` gives `watermark: {column, delay_ms}`",
        ));
    }
    if spec.source.is_none() && spec.watermark.is_some() {
        return Err(Error::invalid(
            "watermark",
            "is for `source:`; with `sources:`, give each table's under `watermarks: {<table>: {column, delay_ms}}`",
        ));
    }
    if let Some(w) = &spec.watermark {
        w.validate("watermark", INPUT)?;
    }
    for (name, w) in &spec.watermarks {
        let field = format!("watermarks.{name}");
        if !spec.sources.contains_key(name) {
            let names: Vec<&str> = spec.sources.keys().map(String::as_str).collect();
            return Err(Error::invalid(
                field,
                format!("names no table of `sources:` ({})", names.join(", ")),
            ));
        }
        w.validate(&field, name)?;
    }
    if spec.dedup.is_some() && spec.source.is_none() {
        return Err(Error::invalid(
            "dedup",
            "deduplicates the output of a query with one `source:`; a query with `sources:` cannot use it yet",
        ));
    }
    Ok(())
}

/// Checks one source's settings at spec field `field`.
fn validate_source(field: &str, source: &SourceSpec) -> Result<()> {
    match source {
        SourceSpec::Rate(r) => {
            if r.partitions == 0 || r.partitions > MAX_PARTITIONS {
                return Err(Error::invalid(
                    format!("{field}.rate.partitions"),
                    format!("must be in 1..={MAX_PARTITIONS}, got {}", r.partitions),
                ));
            }
            if r.rows_per_second == 0 || r.rows_per_second > MAX_ROWS_PER_SECOND {
                return Err(Error::invalid(
                    format!("{field}.rate.rows_per_second"),
                    format!(
                        "must be in 1..={MAX_ROWS_PER_SECOND}, got {}",
                        r.rows_per_second
                    ),
                ));
            }
            if r.total_rows == Some(0) {
                return Err(Error::invalid(
                    format!("{field}.rate.total_rows"),
                    "must be at least 1",
                ));
            }
            Ok(())
        }
        SourceSpec::Files(f) => f.validate(&format!("{field}.files")),
        SourceSpec::Kafka(k) => k.validate(&format!("{field}.kafka")),
        SourceSpec::Nexmark(n) => n.validate(&format!("{field}.nexmark")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINK: &str = "sink:\n  files:\n    path: /tmp/out\n";

    fn parse(inputs: &str) -> Result<QuerySpec> {
        QuerySpec::parse(&format!("name: q\n{inputs}{SINK}"))
    }

    fn field(inputs: &str) -> String {
        match parse(inputs).expect_err("refused") {
            Error::InvalidSpec { field, .. } => field,
            e => panic!("not a spec error: {e}"),
        }
    }

    const RATE: &str = "{rate: {partitions: 1, rows_per_second: 10}}";

    #[test]
    fn sources_name_tables_and_source_is_the_table_input() {
        let one = parse(&format!("source: {RATE}\n")).unwrap();
        let names: Vec<&str> = one.inputs().iter().map(|i| i.name).collect();
        assert_eq!(names, ["input"]);
        let text = format!(
            "sources:\n  orders: {RATE}\n  payments: {{files: {{path: /tmp/p, format: jsonl, schema: [{{name: a, type: int64}}]}}}}\nwatermarks:\n  orders: {{column: timestamp, delay_ms: 10}}\nsql: SELECT * FROM orders\n"
        );
        let two = parse(&text).unwrap();
        assert_eq!(
            field(&text.replace("sql: SELECT * FROM orders\n", "")),
            "sql",
            "a query over sources names them"
        );
        let inputs = two.inputs();
        let names: Vec<&str> = inputs.iter().map(|i| i.name).collect();
        assert_eq!(names, ["orders", "payments"]);
        assert_eq!(inputs[0].watermark.map(|w| w.delay_ms), Some(10));
        assert_eq!(inputs[1].watermark, None);
        let wire = sluice_proto::QuerySpec::from(&two);
        assert_eq!(QuerySpec::try_from(&wire).unwrap(), two);
        let json = serde_json::to_string(&two).unwrap();
        assert_eq!(QuerySpec::parse(&json).unwrap(), two);
    }

    #[test]
    fn each_misuse_names_its_field() {
        assert_eq!(
            field(&format!("source: {RATE}\nsources: {{a: {RATE}}}\n")),
            "sources"
        );
        assert_eq!(field(""), "source");
        assert_eq!(field(&format!("sources: {{Bad: {RATE}}}\n")), "sources.Bad");
        assert_eq!(
            field("sources: {a: {rate: {partitions: 0, rows_per_second: 1}}}\n"),
            "sources.a.rate.partitions"
        );
        assert_eq!(
            field(&format!(
                "sources: {{a: {RATE}}}\nwatermark: {{column: t, delay_ms: 1}}\n"
            )),
            "watermark"
        );
        assert_eq!(
            field(&format!(
                "source: {RATE}\nwatermarks: {{input: {{column: t, delay_ms: 1}}}}\n"
            )),
            "watermarks"
        );
        assert_eq!(
            field(&format!(
                "sources: {{a: {RATE}}}\nwatermarks: {{b: {{column: t, delay_ms: 1}}}}\n"
            )),
            "watermarks.b"
        );
        assert_eq!(
            field(&format!(
                "sources: {{a: {RATE}}}\nwatermarks: {{a: {{column: '', delay_ms: 1}}}}\n"
            )),
            "watermarks.a.column"
        );
    }
}
