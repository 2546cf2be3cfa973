//! Static tables (`tables:`): files a query's SQL joins the stream with,
//! as Spark's stream-static joins do. Each is one file or a directory of
//! files, in any input format.

use serde::{Deserialize, Serialize};
use sluice_proto as pb;

use super::files::{
    ColumnSpec, CsvOptions, Format, columns_from_proto, columns_to_proto, format_from_proto,
    validate_input,
};
use crate::error::{Error, Result};

/// One static table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSpec {
    /// A file, or a directory whose files (not starting with `.` or `_`)
    /// together are the table.
    pub path: String,
    pub format: Format,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Vec<ColumnSpec>>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub infer: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csv: Option<CsvOptions>,
}

impl TableSpec {
    pub fn csv(&self) -> CsvOptions {
        self.csv.clone().unwrap_or_default()
    }
}

/// Checks a table's name (a plain SQL identifier other than `input`) and
/// its fields.
pub fn validate_table(name: &str, t: &TableSpec) -> Result<()> {
    let field = format!("tables.{name}");
    validate_table_name(&field, name)?;
    if name == "input" {
        return Err(Error::invalid(field, "`input` is the stream's table"));
    }
    validate_input(&field, &t.path, t.format, &t.schema, t.infer, &t.csv)
}

/// The longest table name (of `tables:` and `sources:`), as a query's name.
pub const MAX_TABLE_NAME: usize = 63;

/// Checks that `name`, at spec field `field`, is a table name the SQL can
/// spell without quotes, of at most [`MAX_TABLE_NAME`] characters.
pub fn validate_table_name(field: &str, name: &str) -> Result<()> {
    let ok = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_lowercase() || b == b'_')
        && name.len() <= MAX_TABLE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !ok {
        let shown = match name.chars().count() {
            n if n > MAX_TABLE_NAME => {
                let start: String = name.chars().take(32).collect();
                format!("{start:?}... ({n} characters)")
            }
            _ => format!("{name:?}"),
        };
        return Err(Error::invalid(
            field,
            format!(
                "a table name must match [a-z_][a-z0-9_]{{0,{}}}, got {shown}",
                MAX_TABLE_NAME - 1
            ),
        ));
    }
    Ok(())
}

impl TableSpec {
    /// The table named `name`, on the wire.
    pub fn to_proto(&self, name: &str) -> pb::StaticTable {
        let t = self;
        pb::StaticTable {
            name: name.to_string(),
            path: t.path.clone(),
            format: t.format.as_str().to_string(),
            schema: columns_to_proto(&t.schema),
            infer: t.infer,
            csv: t.csv.as_ref().map(Into::into),
        }
    }
}

impl TryFrom<&pb::StaticTable> for TableSpec {
    type Error = Error;

    fn try_from(t: &pb::StaticTable) -> Result<Self> {
        Ok(TableSpec {
            path: t.path.clone(),
            format: format_from_proto(&format!("tables.{}.format", t.name), &t.format)?,
            schema: columns_from_proto(&t.schema),
            infer: t.infer,
            csv: t.csv.as_ref().map(Into::into),
        })
    }
}
