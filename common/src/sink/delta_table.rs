//! What a Delta table asks of its data files and of a writer that joins
//! it: the Arrow types its Parquet files hold (those Delta readers expect
//! for the table's types), a data file's partition values read back from
//! its path, an `add` path as the URI Delta stores, a commit file read as
//! its actions, and the schema and partition columns its log says,
//! compared with a query's output.
//!
//! ```text
//! <table>/<col>=<value>/.../part-<batch:020>-<partition:05>[-<seq:04>].<tag>.parquet
//! ```

use std::sync::Arc;

use arrow_array::ArrayRef;
use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMicrosecondType;
use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};
use serde_json::Value;

use super::HIVE_NULL;
use crate::error::{Error, Result};

/// The characters an `add` path keeps as they are: the rest are
/// percent-encoded, as the protocol's URIs are.
const PATH_KEEPS: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/')
    .remove(b'=');

/// The schema of the table's data files for `output`, the query's output:
/// each column in the Arrow type that Parquet stores as Delta's type for
/// it (timestamps in microseconds, UTC; unsigned integers widened; views
/// and large or dictionary-encoded columns plain). A type Delta cannot
/// hold is refused, naming its column.
pub fn file_schema(output: &Schema) -> Result<SchemaRef> {
    let fields = output
        .fields()
        .iter()
        .map(|f| file_field(f, f.name()))
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

fn file_field(f: &Field, path: &str) -> Result<Field> {
    Ok(f.clone()
        .with_data_type(file_type(f.data_type(), path)?)
        .with_metadata(Default::default()))
}

fn file_type(t: &DataType, path: &str) -> Result<DataType> {
    use DataType::*;
    Ok(match t {
        Boolean | Int8 | Int16 | Int32 | Int64 | Float32 | Float64 | Utf8 | Binary | Date32 => {
            t.clone()
        }
        UInt8 => Int16,
        UInt16 => Int32,
        UInt32 => Int64,
        LargeUtf8 | Utf8View => Utf8,
        LargeBinary | BinaryView | FixedSizeBinary(_) => Binary,
        Date64 => Date32,
        Timestamp(_, _) => Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        Decimal128(p, s) if *p <= 38 && *s >= 0 => t.clone(),
        Dictionary(_, values) => file_type(values, path)?,
        Struct(fields) => Struct(
            fields
                .iter()
                .map(|f| file_field(f, &format!("{path}.{}", f.name())))
                .collect::<Result<Vec<_>>>()?
                .into(),
        ),
        List(item) | LargeList(item) | FixedSizeList(item, _) => {
            List(Arc::new(file_field(item, &format!("{path}[]"))?))
        }
        Map(entries, sorted) => Map(Arc::new(file_field(entries, path)?), *sorted),
        other => {
            return Err(Error::Encoding(format!(
                "column `{path}` is of type {other}, which a Delta table cannot hold"
            )));
        }
    })
}

/// `column` in the data files' type `to` (see [`file_schema`]). A
/// timestamp without a time zone is taken as UTC, as Delta's `timestamp`
/// is: its values only change unit (Arrow's cast to a zone would read
/// each as a local time of that zone, an offset lookup per row).
pub fn file_column(column: &ArrayRef, to: &DataType) -> Result<ArrayRef> {
    let cast = |c: &ArrayRef, t: &DataType| {
        arrow_cast::cast(c, t)
            .map_err(|e| Error::Encoding(format!("a column into the table's types: {e}")))
    };
    match (column.data_type(), to) {
        (DataType::Timestamp(_, None), DataType::Timestamp(TimeUnit::Microsecond, Some(tz))) => {
            let naive = cast(column, &DataType::Timestamp(TimeUnit::Microsecond, None))?;
            let values = naive.as_primitive::<TimestampMicrosecondType>().clone();
            Ok(Arc::new(values.with_timezone(tz.clone())))
        }
        _ if column.data_type() == to => Ok(column.clone()),
        _ => cast(column, to),
    }
}

/// Whether a column of type `t` may partition a table: its values name
/// directories exactly as Delta writes them (text, integers, dates,
/// booleans).
pub fn partitions_by(t: &DataType) -> bool {
    use DataType::*;
    match t {
        Dictionary(_, values) => partitions_by(values),
        Utf8 | LargeUtf8 | Utf8View | Boolean | Date32 => true,
        t => t.is_integer(),
    }
}

/// The partition values of the data file at `path` (relative to the
/// table's root), one per partition column of `columns`, from its
/// directories: `None` for a null. A path whose directories are not
/// exactly those columns, in order, is refused.
pub fn partition_values(path: &str, columns: &[String]) -> Result<Vec<(String, Option<String>)>> {
    let refused = |why: String| Error::Encoding(format!("data file {path:?}: {why}"));
    let dirs: Vec<&str> = path.split('/').collect();
    let dirs = &dirs[..dirs.len() - 1];
    if dirs.len() != columns.len() {
        return Err(refused(format!(
            "it lies {} directories deep; the table has {} partition columns",
            dirs.len(),
            columns.len()
        )));
    }
    columns
        .iter()
        .zip(dirs)
        .map(|(column, dir)| {
            let (name, value) = dir
                .split_once('=')
                .ok_or_else(|| refused(format!("directory {dir:?} is not `column=value`")))?;
            if unescape(name)? != *column {
                return Err(refused(format!(
                    "directory {dir:?} does not name partition column {column:?}"
                )));
            }
            let value = (value != HIVE_NULL).then(|| unescape(value)).transpose()?;
            Ok((column.clone(), value))
        })
        .collect()
}

fn unescape(s: &str) -> Result<String> {
    percent_decode_str(s)
        .decode_utf8()
        .map(|c| c.into_owned())
        .map_err(|e| Error::Encoding(format!("{s:?} is not UTF-8 once unescaped: {e}")))
}

/// The `add` action's path of a data file at `path`: a relative URI.
pub fn add_path(path: &str) -> String {
    utf8_percent_encode(path, PATH_KEEPS).to_string()
}

/// The actions of commit file `bytes` (named `what` in errors), each with
/// its line number.
pub fn actions(bytes: &[u8], what: &str) -> Result<Vec<(usize, Value)>> {
    let text = std::str::from_utf8(bytes).map_err(|e| corrupt(what, 0, e))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, line)| {
            let action = serde_json::from_str(line).map_err(|e| corrupt(what, n + 1, e))?;
            Ok((n + 1, action))
        })
        .collect()
}

/// The error of commit `what` at `line` (0: the whole file).
pub fn corrupt(what: &str, line: usize, reason: impl std::fmt::Display) -> Error {
    Error::Corrupt {
        path: what.to_string(),
        reason: match line {
            0 => reason.to_string(),
            n => format!("line {n}: {reason}"),
        },
    }
}

/// What a table's log says of it: the newest `metaData` of a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableMeta {
    pub schema_string: String,
    pub partition_columns: Vec<String>,
}

/// The `metaData` action of commit file `bytes` (named `what` in errors),
/// if it has one.
pub fn metadata_of(bytes: &[u8], what: &str) -> Result<Option<TableMeta>> {
    for (n, action) in actions(bytes, what)? {
        let Some(meta) = action.get("metaData") else {
            continue;
        };
        let schema_string = meta
            .get("schemaString")
            .and_then(Value::as_str)
            .ok_or_else(|| corrupt(what, n, "metaData without a schemaString"))?;
        let partition_columns = meta
            .get("partitionColumns")
            .and_then(Value::as_array)
            .map(|cols| cols.iter().filter_map(Value::as_str).map(str::to_string))
            .ok_or_else(|| corrupt(what, n, "metaData without partitionColumns"))?
            .collect();
        return Ok(Some(TableMeta {
            schema_string: schema_string.to_string(),
            partition_columns,
        }));
    }
    Ok(None)
}

/// A table's `protocol`: the reader and writer versions it asks for, and
/// the table features it names (versions 3 and 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub reader: u64,
    pub writer: u64,
    pub features: Vec<String>,
}

impl Protocol {
    /// Why Sluice may not append to a table of this protocol, if it may
    /// not: it writes as a writer of version 2 (respecting `appendOnly`
    /// by only appending) for readers of version 1, and knows no table
    /// feature.
    pub fn refusal(&self) -> Option<String> {
        (self.reader > 1 || self.writer > 2).then(|| {
            let features = match self.features.is_empty() {
                true => String::new(),
                false => format!(" (features: {})", self.features.join(", ")),
            };
            format!(
                "asks for reader version {} and writer version {}{features}; Sluice appends \
                 to tables of reader version 1 and writer version 2",
                self.reader, self.writer
            )
        })
    }
}

/// The `protocol` action of commit file `bytes` (named `what` in errors),
/// if it has one.
pub fn protocol_of(bytes: &[u8], what: &str) -> Result<Option<Protocol>> {
    for (n, action) in actions(bytes, what)? {
        let Some(p) = action.get("protocol") else {
            continue;
        };
        let version = |key: &str| {
            p.get(key)
                .and_then(Value::as_u64)
                .ok_or_else(|| corrupt(what, n, format!("protocol without {key}")))
        };
        let mut features: Vec<String> = ["readerFeatures", "writerFeatures"]
            .iter()
            .filter_map(|k| p.get(*k).and_then(Value::as_array))
            .flatten()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect();
        features.sort();
        features.dedup();
        return Ok(Some(Protocol {
            reader: version("minReaderVersion")?,
            writer: version("minWriterVersion")?,
            features,
        }));
    }
    Ok(None)
}

/// How a query's output (`ours`, a [`super::delta::schema_string`])
/// differs from the table's schema (`table`), one line per column: a
/// column only one has, one whose type differs, or one the table holds
/// without nulls that the output may leave null. Empty: the query can
/// append to the table.
pub fn schema_difference(table: &str, ours: &str) -> Result<Vec<String>> {
    let fields = |s: &str| -> Result<Vec<Value>> {
        let v: Value = serde_json::from_str(s)
            .map_err(|e| Error::Encoding(format!("a Delta schemaString that is not JSON: {e}")))?;
        Ok(v.get("fields")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default())
    };
    let (table, ours) = (fields(table)?, fields(ours)?);
    let name = |f: &Value| {
        f.get("name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let find = |list: &[Value], n: &str| list.iter().find(|f| name(f) == n).cloned();
    let mut out = Vec::new();
    for f in &ours {
        let n = name(f);
        match find(&table, &n) {
            None => out.push(format!(
                "column `{n}` is in the query's output, not in the table"
            )),
            Some(t) if t.get("type") != f.get("type") => out.push(format!(
                "column `{n}` is {} in the table and {} in the query's output",
                t["type"], f["type"]
            )),
            Some(t) if t["nullable"] == false && f["nullable"] == true => out.push(format!(
                "column `{n}` holds no nulls in the table, and the query's output may be null"
            )),
            Some(_) => {}
        }
    }
    for t in &table {
        let n = name(t);
        if find(&ours, &n).is_none() {
            out.push(format!(
                "column `{n}` is in the table, not in the query's output"
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
#[path = "delta_table_tests.rs"]
mod tests;
