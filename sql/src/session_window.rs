//! Session windows, after Spark's `session_window(ts, gap)`: in `GROUP
//! BY`, each row opens the session `[ts, ts + gap)`, a struct `{start,
//! end}` like a window's; the reduce stage merges a key's sessions that
//! overlap or touch (a row within `gap` of a session joins it), across
//! batches. Outside a stateful aggregation's reduce, the function is only
//! the row's own session.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::TimestampMillisecondType;
use arrow_array::{ArrayRef, TimestampMillisecondArray};
use arrow_schema::{DataType, TimeUnit};
use datafusion::common::{Result, plan_err};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

use crate::window::{window_type, windows};
use crate::window_length::millis;

/// The function's name.
pub const NAME: &str = "session_window";

/// `session_window`, to register in a session.
pub fn function() -> ScalarUDF {
    ScalarUDF::new_from_impl(SessionWindow {
        signature: Signature::variadic_any(Volatility::Immutable),
    })
}

#[derive(Debug, PartialEq, Eq, Hash)]
struct SessionWindow {
    signature: Signature,
}

impl ScalarUDFImpl for SessionWindow {
    fn name(&self) -> &str {
        NAME
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, args: &[DataType]) -> Result<DataType> {
        if args.len() != 2 || !matches!(args[0], DataType::Timestamp(_, _)) {
            return plan_err!(
                "{NAME}(ts, gap) takes a timestamp and an interval string, got {args:?}"
            );
        }
        Ok(window_type())
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let gap = millis(&args.args[1], NAME)?;
        let ts = args.args[0].to_array(args.number_rows)?;
        let ts = arrow_cast::cast(&ts, &DataType::Timestamp(TimeUnit::Millisecond, None))?;
        let starts: TimestampMillisecondArray =
            ts.as_primitive::<TimestampMillisecondType>().clone();
        let out: ArrayRef = Arc::new(windows(starts, gap)?);
        Ok(ColumnarValue::Array(out))
    }
}
