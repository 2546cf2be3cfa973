//! The file source's spec (`source.files`), the shared parts of every file
//! input (format, schema, csv options), and the column types a schema may
//! name.

use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use serde::{Deserialize, Serialize};

use sluice_proto as pb;

use crate::error::{Error, Result};

/// The largest `max_files_per_batch`.
pub const MAX_FILES_PER_BATCH: u32 = 100_000;

/// A file format Sluice reads and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Jsonl,
    Csv,
    Parquet,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Jsonl => "jsonl",
            Format::Csv => "csv",
            Format::Parquet => "parquet",
        }
    }

    /// The format named `name` (as in the spec and on the wire).
    pub fn parse(name: &str) -> Option<Format> {
        match name {
            "jsonl" => Some(Format::Jsonl),
            "csv" => Some(Format::Csv),
            "parquet" => Some(Format::Parquet),
            _ => None,
        }
    }
}

/// What to do with a record that does not parse or does not fit the schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnBadRecord {
    /// Fail the task, naming the file and line.
    #[default]
    Fail,
    /// Skip it, and count it in the batch's `bad_records`.
    Skip,
}

impl OnBadRecord {
    pub fn as_str(self) -> &'static str {
        match self {
            OnBadRecord::Fail => "fail",
            OnBadRecord::Skip => "skip",
        }
    }

    /// The setting named `text` (empty: the default), or an error naming
    /// `field`.
    pub fn parse(field: &str, text: &str) -> Result<Self> {
        match text {
            "" | "fail" => Ok(OnBadRecord::Fail),
            "skip" => Ok(OnBadRecord::Skip),
            other => Err(Error::invalid(
                field,
                format!("unknown value {other:?}; expected fail or skip"),
            )),
        }
    }
}

/// One column of a declared schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ColumnSpec {
    pub name: String,
    #[serde(rename = "type")]
    pub ty: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsvOptions {
    #[serde(default = "yes")]
    pub header: bool,
    #[serde(default = "comma")]
    pub delimiter: String,
}

impl Default for CsvOptions {
    fn default() -> Self {
        CsvOptions {
            header: true,
            delimiter: comma(),
        }
    }
}

impl CsvOptions {
    /// The delimiter as one byte (validated by [`validate_input`]).
    pub fn delimiter_byte(&self) -> u8 {
        self.delimiter.as_bytes().first().copied().unwrap_or(b',')
    }
}

fn yes() -> bool {
    true
}

fn comma() -> String {
    ",".to_string()
}

/// `source.files`: the files that appear in a directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSourceSpec {
    pub path: String,
    pub format: Format,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Vec<ColumnSpec>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub infer: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_files_per_batch: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvOptions>,
    #[serde(default)]
    pub on_bad_record: OnBadRecord,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_files: Option<u64>,
}

impl FileSourceSpec {
    pub fn csv(&self) -> CsvOptions {
        self.csv.clone().unwrap_or_default()
    }

    pub fn validate(&self, field: &str) -> Result<()> {
        validate_input(
            field,
            &self.path,
            self.format,
            &self.schema,
            self.infer,
            &self.csv,
        )?;
        if let Some(n) = self.max_files_per_batch
            && (n == 0 || n > MAX_FILES_PER_BATCH)
        {
            return Err(Error::invalid(
                format!("{field}.max_files_per_batch"),
                format!("must be in 1..={MAX_FILES_PER_BATCH}, got {n}"),
            ));
        }
        if self.total_files == Some(0) {
            return Err(Error::invalid(
                format!("{field}.total_files"),
                "must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Checks what every file input (a source or a static table) shares.
pub fn validate_input(
    field: &str,
    path: &str,
    format: Format,
    schema: &Option<Vec<ColumnSpec>>,
    infer: bool,
    csv: &Option<CsvOptions>,
) -> Result<()> {
    crate::storage::validate_location(path)
        .map_err(|reason| Error::invalid(format!("{field}.path"), reason))?;
    match (schema, infer) {
        (Some(_), true) => {
            return Err(Error::invalid(
                format!("{field}.infer"),
                "give either `schema` or `infer: true`, not both",
            ));
        }
        (None, false) if format != Format::Parquet => {
            return Err(Error::invalid(
                format!("{field}.schema"),
                format!(
                    "required for {}: declare the columns, or set `infer: true`",
                    format.as_str()
                ),
            ));
        }
        (Some(columns), _) => {
            declared_schema(columns)
                .map_err(|(i, reason)| Error::invalid(format!("{field}.schema[{i}]"), reason))?;
        }
        _ => {}
    }
    if let Some(c) = csv {
        if format != Format::Csv {
            return Err(Error::invalid(
                format!("{field}.csv"),
                format!("csv options given for format {}", format.as_str()),
            ));
        }
        if c.delimiter.len() != 1 || c.delimiter == "\n" || c.delimiter == "\"" {
            return Err(Error::invalid(
                format!("{field}.csv.delimiter"),
                format!(
                    "must be one ASCII character other than a quote or newline, got {:?}",
                    c.delimiter
                ),
            ));
        }
    }
    Ok(())
}

/// The Arrow type a schema's `type` names (Spark's and SQL's names).
pub fn column_type(name: &str) -> Option<DataType> {
    Some(match name.to_ascii_lowercase().as_str() {
        "bigint" | "long" | "int64" => DataType::Int64,
        "int" | "integer" | "int32" => DataType::Int32,
        "smallint" | "short" | "int16" => DataType::Int16,
        "tinyint" | "byte" | "int8" => DataType::Int8,
        "double" | "float64" => DataType::Float64,
        "float" | "real" | "float32" => DataType::Float32,
        "string" | "varchar" | "text" | "utf8" => DataType::Utf8,
        "boolean" | "bool" => DataType::Boolean,
        "timestamp" => DataType::Timestamp(TimeUnit::Millisecond, None),
        "date" => DataType::Date32,
        _ => return None,
    })
}

/// The type names [`column_type`] knows, for errors.
pub const COLUMN_TYPES: &str =
    "bigint, int, smallint, tinyint, double, float, string, boolean, timestamp, date";

/// The Arrow schema of declared columns (all nullable), or the index of
/// the first bad column and why.
pub fn declared_schema(columns: &[ColumnSpec]) -> std::result::Result<SchemaRef, (usize, String)> {
    if columns.is_empty() {
        return Err((0, "a schema needs at least one column".into()));
    }
    let mut fields = Vec::with_capacity(columns.len());
    for (i, c) in columns.iter().enumerate() {
        if c.name.is_empty() {
            return Err((i, "a column needs a name".into()));
        }
        if columns[..i].iter().any(|o| o.name == c.name) {
            return Err((i, format!("column {:?} is declared twice", c.name)));
        }
        let ty = column_type(&c.ty).ok_or_else(|| {
            (
                i,
                format!(
                    "column {:?}: unknown type {:?}; known: {COLUMN_TYPES}",
                    c.name, c.ty
                ),
            )
        })?;
        fields.push(Field::new(&c.name, ty, true));
    }
    Ok(Arc::new(Schema::new(fields)))
}

impl From<&CsvOptions> for pb::CsvOptions {
    fn from(c: &CsvOptions) -> Self {
        pb::CsvOptions {
            header: c.header,
            delimiter: c.delimiter.clone(),
        }
    }
}

impl From<&pb::CsvOptions> for CsvOptions {
    fn from(c: &pb::CsvOptions) -> Self {
        CsvOptions {
            header: c.header,
            delimiter: c.delimiter.clone(),
        }
    }
}

/// Columns on the wire: an empty list is "not declared".
pub fn columns_to_proto(schema: &Option<Vec<ColumnSpec>>) -> Vec<pb::Column> {
    schema
        .iter()
        .flatten()
        .map(|c| pb::Column {
            name: c.name.clone(),
            r#type: c.ty.clone(),
        })
        .collect()
}

pub fn columns_from_proto(columns: &[pb::Column]) -> Option<Vec<ColumnSpec>> {
    (!columns.is_empty()).then(|| {
        columns
            .iter()
            .map(|c| ColumnSpec {
                name: c.name.clone(),
                ty: c.r#type.clone(),
            })
            .collect()
    })
}

/// A format named on the wire, or an error naming `field`.
pub fn format_from_proto(field: &str, name: &str) -> Result<Format> {
    Format::parse(name).ok_or_else(|| {
        Error::invalid(
            field,
            format!("unknown format {name:?}; supported: jsonl, csv, parquet"),
        )
    })
}

impl From<&FileSourceSpec> for pb::FileSource {
    fn from(f: &FileSourceSpec) -> Self {
        pb::FileSource {
            path: f.path.clone(),
            format: f.format.as_str().to_string(),
            schema: columns_to_proto(&f.schema),
            infer: f.infer,
            max_files_per_batch: f.max_files_per_batch,
            csv: f.csv.as_ref().map(Into::into),
            on_bad_record: f.on_bad_record.as_str().to_string(),
            total_files: f.total_files,
        }
    }
}

impl TryFrom<&pb::FileSource> for FileSourceSpec {
    type Error = Error;

    fn try_from(f: &pb::FileSource) -> Result<Self> {
        Ok(FileSourceSpec {
            path: f.path.clone(),
            format: format_from_proto("source.files.format", &f.format)?,
            schema: columns_from_proto(&f.schema),
            infer: f.infer,
            max_files_per_batch: f.max_files_per_batch,
            csv: f.csv.as_ref().map(Into::into),
            on_bad_record: OnBadRecord::parse("source.files.on_bad_record", &f.on_bad_record)?,
            total_files: f.total_files,
        })
    }
}
