//! Iceberg's schema as Sluice writes and checks it: the Iceberg type of
//! each output column, the schema's JSON (fields with ids), and the Arrow
//! schema of the data files, whose fields carry their ids
//! (`PARQUET:field_id`), as readers match columns by id, not name.
//!
//! A table holds primitive columns only: a struct, list or map column is
//! refused by name.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Schema, SchemaRef, TimeUnit};
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One column of an Iceberg schema.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Column {
    pub id: i32,
    pub name: String,
    pub required: bool,
    /// The Iceberg type: `long`, `string`, `decimal(10, 2)`, ... (a nested
    /// type is kept as its JSON text, and refused where it is written).
    #[serde(rename = "type", with = "type_json")]
    pub type_name: String,
}

/// Reads a type that is a string as it is, and any other (a nested type's
/// object) as its JSON text.
mod type_json {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &str, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
        Ok(match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(t) => t,
            other => other.to_string(),
        })
    }
}

/// The Iceberg type of an output column of type `t`, or why it has none.
pub fn iceberg_type(t: &DataType) -> std::result::Result<String, String> {
    use DataType::*;
    Ok(match t {
        Boolean => "boolean".into(),
        Int8 | Int16 | Int32 | UInt8 | UInt16 => "int".into(),
        Int64 | UInt32 => "long".into(),
        Float32 => "float".into(),
        Float64 => "double".into(),
        Utf8 | LargeUtf8 | Utf8View => "string".into(),
        Binary | LargeBinary | BinaryView | FixedSizeBinary(_) => "binary".into(),
        Date32 | Date64 => "date".into(),
        Timestamp(_, _) => "timestamptz".into(),
        Decimal128(p, s) if *p <= 38 && *s >= 0 => format!("decimal({p}, {s})"),
        Dictionary(_, values) => iceberg_type(values)?,
        other => {
            return Err(format!(
                "{other} has no Iceberg type Sluice writes (primitive columns only)"
            ));
        }
    })
}

/// The Arrow type a data file holds for Iceberg type `t`.
fn arrow_type(t: &str) -> Option<DataType> {
    Some(match t {
        "boolean" => DataType::Boolean,
        "int" => DataType::Int32,
        "long" => DataType::Int64,
        "float" => DataType::Float32,
        "double" => DataType::Float64,
        "string" => DataType::Utf8,
        "binary" => DataType::Binary,
        "date" => DataType::Date32,
        "timestamptz" => DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
        "timestamp" => DataType::Timestamp(TimeUnit::Microsecond, None),
        t => {
            let (p, s) = t
                .strip_prefix("decimal(")?
                .strip_suffix(')')?
                .split_once(',')?;
            DataType::Decimal128(p.trim().parse().ok()?, s.trim().parse().ok()?)
        }
    })
}

/// The columns of a new table for `output`: ids 1, 2, ... in order.
pub fn columns_of(output: &Schema) -> Result<Vec<Column>> {
    output
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let type_name = iceberg_type(f.data_type())
                .map_err(|why| Error::Encoding(format!("column {:?}: {why}", f.name())))?;
            Ok(Column {
                id: i as i32 + 1,
                name: f.name().clone(),
                required: !f.is_nullable(),
                type_name,
            })
        })
        .collect()
}

/// How the table's `columns` differ from the query's `output`, one line
/// per difference, naming the column; empty when the output fits. A
/// nullable output column does not fit a required one; a required output
/// column fits either.
pub fn schema_difference(columns: &[Column], output: &Schema) -> Vec<String> {
    let mut out = Vec::new();
    let by_name: HashMap<&str, &Column> = columns.iter().map(|c| (c.name.as_str(), c)).collect();
    for f in output.fields() {
        let Some(c) = by_name.get(f.name().as_str()) else {
            out.push(format!("column {:?} is not in the table", f.name()));
            continue;
        };
        match iceberg_type(f.data_type()) {
            Ok(t) if t == c.type_name => {}
            Ok(t) => out.push(format!(
                "column {:?} is {} in the table, {t} in the output",
                f.name(),
                c.type_name
            )),
            Err(why) => out.push(format!("column {:?}: {why}", f.name())),
        }
        if c.required && f.is_nullable() {
            out.push(format!(
                "column {:?} is required in the table, nullable in the output",
                f.name()
            ));
        }
    }
    for c in columns {
        if output.field_with_name(&c.name).is_err() {
            out.push(format!(
                "column {:?} of the table is not in the output",
                c.name
            ));
        }
    }
    out
}

/// The Arrow schema of the data files of a table with `columns`, in the
/// order of `output`'s columns, each field carrying its id.
pub fn file_schema(columns: &[Column], output: &Schema) -> Result<SchemaRef> {
    let fields = output
        .fields()
        .iter()
        .map(|f| {
            let c = columns
                .iter()
                .find(|c| c.name == *f.name())
                .ok_or_else(|| {
                    Error::Encoding(format!("column {:?} is not in the table", f.name()))
                })?;
            let t = arrow_type(&c.type_name).ok_or_else(|| {
                Error::Encoding(format!(
                    "column {:?} is {} in the table, which Sluice does not write",
                    c.name, c.type_name
                ))
            })?;
            let meta = [(PARQUET_FIELD_ID_META_KEY.to_string(), c.id.to_string())];
            Ok(Field::new(&c.name, t, !c.required).with_metadata(meta.into()))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Arc::new(Schema::new(fields)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> Schema {
        Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("city", DataType::Utf8View, true),
            Field::new("ts", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("price", DataType::Decimal128(10, 2), true),
        ])
    }

    #[test]
    fn a_new_tables_columns_are_numbered_in_order_with_their_types() {
        let cols = columns_of(&output()).unwrap();
        let got: Vec<_> = cols
            .iter()
            .map(|c| (c.id, c.name.as_str(), c.required, c.type_name.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (1, "id", true, "long"),
                (2, "city", false, "string"),
                (3, "ts", false, "timestamptz"),
                (4, "price", false, "decimal(10, 2)"),
            ]
        );
        let json = serde_json::to_string(&cols[0]).unwrap();
        assert_eq!(
            json,
            r#"{"id":1,"name":"id","required":true,"type":"long"}"#
        );
        let files = file_schema(&cols, &output()).unwrap();
        let id = files.field(2).metadata().get(PARQUET_FIELD_ID_META_KEY);
        assert_eq!(id.map(String::as_str), Some("3"));
        assert_eq!(
            files.field(2).data_type(),
            &DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
        );
    }

    #[test]
    fn differences_name_each_column() {
        let mut cols = columns_of(&output()).unwrap();
        assert!(schema_difference(&cols, &output()).is_empty());
        cols[1].required = true;
        cols[3].type_name = "double".into();
        cols.push(Column {
            id: 9,
            name: "extra".into(),
            required: false,
            type_name: "int".into(),
        });
        let d = schema_difference(&cols, &output()).join("; ");
        assert!(d.contains("\"city\" is required in the table"), "{d}");
        assert!(
            d.contains("\"price\" is double in the table, decimal(10, 2) in the output"),
            "{d}"
        );
        assert!(
            d.contains("\"extra\" of the table is not in the output"),
            "{d}"
        );
        let nested = Schema::new(vec![Field::new(
            "tags",
            DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))),
            true,
        )]);
        let e = columns_of(&nested).unwrap_err().to_string();
        assert!(e.contains("\"tags\"") && e.contains("primitive"), "{e}");
        let read: Column =
            serde_json::from_str(r#"{"id":5,"name":"m","required":false,"type":{"type":"list"}}"#)
                .unwrap();
        assert_eq!(read.type_name, r#"{"type":"list"}"#);
    }
}
