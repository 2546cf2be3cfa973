//! Hive-style partition directories (`partition_by`), as Spark's
//! `partitionBy` writes them: `col=value/` per partition column, values
//! escaped as Spark escapes them, nulls as `__HIVE_DEFAULT_PARTITION__`.
//! The partition columns are not written inside the files.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{RecordBatch, UInt32Array};
use arrow_cast::display::{ArrayFormatter, FormatOptions};
use arrow_schema::{Schema, SchemaRef};

use crate::error::ExecutorError;

pub use sluice_common::sink::HIVE_NULL as NULL_DIR;

/// The positions of `names` in `schema`, and the schema of the columns
/// left for the files.
pub fn layout(
    schema: &SchemaRef,
    names: &[String],
) -> Result<(Vec<usize>, SchemaRef), ExecutorError> {
    let mut cols = Vec::with_capacity(names.len());
    for n in names {
        let i = schema.index_of(n).map_err(|_| {
            ExecutorError::MalformedTask(format!(
                "partition_by column {n:?} is not an output column"
            ))
        })?;
        cols.push(i);
    }
    let rest: Vec<_> = (0..schema.fields().len())
        .filter(|i| !cols.contains(i))
        .map(|i| schema.field(i).clone())
        .collect();
    Ok((cols, Arc::new(Schema::new(rest))))
}

/// `batch` split by the values of the columns `cols`: each directory
/// (`a=1/b=x`) with its rows, the partition columns left out, in order of
/// first appearance and with the rows' order kept.
pub fn split(
    batch: &RecordBatch,
    cols: &[usize],
    data: &SchemaRef,
) -> Result<Vec<(String, RecordBatch)>, ExecutorError> {
    let fail = |e: arrow_schema::ArrowError| {
        ExecutorError::from(sluice_common::Error::Encoding(format!("partition_by: {e}")))
    };
    let options = FormatOptions::default().with_null(NULL_DIR);
    let formatters = cols
        .iter()
        .map(|&c| ArrayFormatter::try_new(batch.column(c).as_ref(), &options))
        .collect::<Result<Vec<_>, _>>()
        .map_err(fail)?;
    let names: Vec<&str> = cols
        .iter()
        .map(|&c| batch.schema_ref().field(c).name().as_str())
        .collect();
    let mut groups: Vec<(String, Vec<u32>)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    for row in 0..batch.num_rows() {
        let mut dir = String::new();
        for (k, f) in formatters.iter().enumerate() {
            if k > 0 {
                dir.push('/');
            }
            let value = f.value(row).to_string();
            dir.push_str(&escape(names[k]));
            dir.push('=');
            if value == NULL_DIR || value.is_empty() {
                dir.push_str(NULL_DIR);
            } else {
                dir.push_str(&escape(&value));
            }
        }
        let g = *index.entry(dir.clone()).or_insert_with(|| {
            groups.push((dir, Vec::new()));
            groups.len() - 1
        });
        groups[g].1.push(row as u32);
    }
    let kept: Vec<usize> = (0..batch.num_columns())
        .filter(|i| !cols.contains(i))
        .collect();
    let projected = batch.project(&kept).map_err(fail)?;
    groups
        .into_iter()
        .map(|(dir, rows)| {
            let taken = arrow_select::take::take_record_batch(&projected, &UInt32Array::from(rows))
                .map_err(fail)?;
            let b = RecordBatch::try_new(data.clone(), taken.columns().to_vec()).map_err(fail)?;
            Ok((dir, b))
        })
        .collect()
}

/// A path segment as Spark writes it: the characters that are special in
/// paths or Hive escaped as `%XX`.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let special = c.is_control()
            || matches!(
                c,
                '"' | '#'
                    | '%'
                    | '\''
                    | '*'
                    | '/'
                    | ':'
                    | '='
                    | '?'
                    | '\\'
                    | '\u{7f}'
                    | '{'
                    | '['
                    | ']'
                    | '^'
            );
        if special {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    out
}
