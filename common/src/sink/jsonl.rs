//! JSON lines, the encoding of a jsonl sink's part files: rows as arrow-json
//! writes them, with every timestamp as integer milliseconds.

use arrow_array::RecordBatch;

use crate::error::{Error, Result};

/// Encodes rows as JSON lines. Timestamps are written as integers, in
/// milliseconds since the Unix epoch (the rate source's `timestamp_ms` is
/// `{"timestamp_ms":1700000000000}`, a window is
/// `{"w":{"start":1700000000000,"end":1700000010000}}`); the file source
/// reads both that and RFC 3339 text.
pub fn encode_jsonl(batches: &[RecordBatch]) -> Result<Vec<u8>> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let mut buf = Vec::with_capacity(rows * 48);
    {
        let mut w = arrow_json::LineDelimitedWriter::new(&mut buf);
        for b in batches {
            let b = timestamps_as_millis(b)?;
            w.write(&b).map_err(|e| Error::Encoding(e.to_string()))?;
        }
        w.finish().map_err(|e| Error::Encoding(e.to_string()))?;
    }
    Ok(buf)
}

/// `batch` with every timestamp turned into Int64 milliseconds since the
/// epoch (sub-millisecond digits are dropped), in columns and inside
/// structs and lists (a window's `{start, end}`) alike.
fn timestamps_as_millis(batch: &RecordBatch) -> Result<RecordBatch> {
    use arrow_schema::Schema;
    use std::sync::Arc;

    let schema = batch.schema();
    if !schema.fields().iter().any(|f| has_timestamp(f.data_type())) {
        return Ok(batch.clone());
    }
    let mut fields = Vec::with_capacity(schema.fields().len());
    let mut columns = Vec::with_capacity(schema.fields().len());
    for (f, c) in schema.fields().iter().zip(batch.columns()) {
        let (f, c) = as_millis(f, c)?;
        fields.push(f);
        columns.push(c);
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)
        .map_err(|e| Error::Encoding(e.to_string()))
}

fn has_timestamp(t: &arrow_schema::DataType) -> bool {
    use arrow_schema::DataType;
    match t {
        DataType::Timestamp(..) => true,
        DataType::Struct(fields) => fields.iter().any(|f| has_timestamp(f.data_type())),
        DataType::List(f) | DataType::LargeList(f) => has_timestamp(f.data_type()),
        _ => false,
    }
}

/// One column with its timestamps as milliseconds.
fn as_millis(
    field: &arrow_schema::FieldRef,
    column: &arrow_array::ArrayRef,
) -> Result<(arrow_schema::FieldRef, arrow_array::ArrayRef)> {
    use arrow_array::cast::AsArray;
    use arrow_array::types::{
        TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    use arrow_array::{Array, ArrayRef, Int64Array, ListArray, StructArray};
    use arrow_schema::{DataType, Field, Fields, TimeUnit};
    use std::sync::Arc;

    let fail = |e: arrow_schema::ArrowError| Error::Encoding(e.to_string());
    if !has_timestamp(field.data_type()) {
        return Ok((field.clone(), column.clone()));
    }
    let renamed = |t: DataType| Arc::new(Field::new(field.name(), t, field.is_nullable()));
    match field.data_type() {
        DataType::Timestamp(unit, _) => {
            let c = column;
            let millis: Int64Array = match unit {
                TimeUnit::Second => c
                    .as_primitive::<TimestampSecondType>()
                    .unary(|v| v.saturating_mul(1000)),
                TimeUnit::Millisecond => c.as_primitive::<TimestampMillisecondType>().unary(|v| v),
                TimeUnit::Microsecond => c
                    .as_primitive::<TimestampMicrosecondType>()
                    .unary(|v| v.div_euclid(1000)),
                TimeUnit::Nanosecond => c
                    .as_primitive::<TimestampNanosecondType>()
                    .unary(|v| v.div_euclid(1_000_000)),
            };
            Ok((renamed(DataType::Int64), Arc::new(millis) as ArrayRef))
        }
        DataType::Struct(children) => {
            let s = column.as_struct();
            let mut fields = Vec::with_capacity(children.len());
            let mut columns = Vec::with_capacity(children.len());
            for (f, c) in children.iter().zip(s.columns()) {
                let (f, c) = as_millis(f, c)?;
                fields.push(f);
                columns.push(c);
            }
            let fields = Fields::from(fields);
            let out =
                StructArray::try_new(fields.clone(), columns, s.nulls().cloned()).map_err(fail)?;
            Ok((renamed(DataType::Struct(fields)), Arc::new(out) as ArrayRef))
        }
        DataType::List(item) => {
            let l = column.as_list::<i32>();
            let (item, values) = as_millis(item, l.values())?;
            let out = ListArray::try_new(
                item.clone(),
                l.offsets().clone(),
                values,
                l.nulls().cloned(),
            )
            .map_err(fail)?;
            Ok((renamed(DataType::List(item)), Arc::new(out) as ArrayRef))
        }
        // A large list of timestamps is written as arrow-json writes it.
        _ => Ok((field.clone(), column.clone())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_inside_structs_and_lists_are_milliseconds_too() {
        use arrow_array::types::TimestampSecondType;
        use arrow_array::{Array, ArrayRef, ListArray, StructArray, TimestampSecondArray};
        use arrow_schema::{DataType, Field, Fields, Schema, TimeUnit};
        use std::sync::Arc;
        let ts = DataType::Timestamp(TimeUnit::Second, None);
        let fields = Fields::from(vec![
            Field::new("start", ts.clone(), true),
            Field::new("end", ts.clone(), true),
        ]);
        let w = StructArray::try_new(
            fields.clone(),
            vec![
                Arc::new(TimestampSecondArray::from(vec![10])) as ArrayRef,
                Arc::new(TimestampSecondArray::from(vec![20])),
            ],
            None,
        )
        .unwrap();
        let l = ListArray::from_iter_primitive::<TimestampSecondType, _, _>(vec![Some(vec![
            Some(1),
            Some(2),
        ])]);
        let schema = Schema::new(vec![
            Field::new("w", DataType::Struct(fields), true),
            Field::new("l", l.data_type().clone(), true),
        ]);
        let b = RecordBatch::try_new(Arc::new(schema), vec![Arc::new(w), Arc::new(l)]).unwrap();
        let text = String::from_utf8(encode_jsonl(&[b]).unwrap()).unwrap();
        assert_eq!(
            text.trim(),
            r#"{"w":{"start":10000,"end":20000},"l":[1000,2000]}"#
        );
    }
}
