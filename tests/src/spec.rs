//! A builder for query specs in YAML, with the defaults of a small test
//! query (4 partitions, 1000 rows/s, trigger 100 ms).

use std::path::Path;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    pub name: String,
    pub partitions: u32,
    pub rows_per_second: u64,
    pub total_rows: Option<u64>,
    pub interval_ms: u64,
    pub max_rows_per_batch: Option<u64>,
    pub sink: String,
    pub format: String,
    pub sql: Option<String>,
    /// Top-level lines added as they are (`output_mode: update`, ...).
    pub extra: Vec<String>,
}

impl Spec {
    /// A query named `name` writing jsonl to `sink` (an absolute path).
    pub fn new(name: &str, sink: &Path) -> Spec {
        Spec {
            name: name.to_string(),
            partitions: 4,
            rows_per_second: 1000,
            total_rows: None,
            interval_ms: 100,
            max_rows_per_batch: None,
            sink: sink.display().to_string(),
            format: "jsonl".to_string(),
            sql: None,
            extra: Vec::new(),
        }
    }

    /// Adds a top-level line, such as `output_mode: complete`.
    pub fn with(mut self, line: &str) -> Self {
        self.extra.push(line.to_string());
        self
    }

    pub fn sql(mut self, sql: &str) -> Self {
        self.sql = Some(sql.to_string());
        self
    }

    pub fn partitions(mut self, n: u32) -> Self {
        self.partitions = n;
        self
    }

    pub fn rows_per_second(mut self, n: u64) -> Self {
        self.rows_per_second = n;
        self
    }

    pub fn total_rows(mut self, n: u64) -> Self {
        self.total_rows = Some(n);
        self
    }

    pub fn interval_ms(mut self, ms: u64) -> Self {
        self.interval_ms = ms;
        self
    }

    pub fn max_rows_per_batch(mut self, n: u64) -> Self {
        self.max_rows_per_batch = Some(n);
        self
    }

    /// The spec as YAML, in the layout of the issue.
    pub fn to_yaml(&self) -> String {
        let mut y = format!(
            "name: {}\nsource:\n  rate:\n    partitions: {}\n    rows_per_second: {}\n",
            self.name, self.partitions, self.rows_per_second
        );
        if let Some(t) = self.total_rows {
            y.push_str(&format!("    total_rows: {t}\n"));
        }
        y.push_str(&format!("trigger:\n  interval_ms: {}\n", self.interval_ms));
        if let Some(m) = self.max_rows_per_batch {
            y.push_str(&format!("max_rows_per_batch: {m}\n"));
        }
        y.push_str(&format!(
            "sink:\n  files:\n    path: {}\n    format: {}\n",
            yaml_string(&self.sink),
            self.format
        ));
        if let Some(sql) = &self.sql {
            y.push_str(&format!("sql: {}\n", yaml_string(sql)));
        }
        for line in &self.extra {
            y.push_str(line);
            y.push('\n');
        }
        y
    }
}

/// A double-quoted YAML scalar (safe for any path).
fn yaml_string(s: &str) -> String {
    serde_json::to_string(s).expect("a string encodes")
}
