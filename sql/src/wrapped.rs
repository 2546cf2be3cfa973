//! A DataFusion scalar function that Sluice wraps: the wrapper is the
//! function (its name, aliases, signature, return type, coercion and
//! documentation) except for what happens when it is called, which is the
//! wrapper's [`Call`].

use arrow_schema::{DataType, FieldRef};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, Documentation, ReturnFieldArgs, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl,
    Signature,
};

/// What a wrapped function does when called: at last, as a rule, the
/// function itself (`inner`).
pub(crate) trait Call:
    std::fmt::Debug + Eq + std::hash::Hash + Send + Sync + 'static
{
    fn call(&self, inner: &ScalarUDF, args: ScalarFunctionArgs) -> Result<ColumnarValue>;
}

/// `inner`, called through `call`.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(crate) struct Wrapped<C> {
    pub inner: ScalarUDF,
    pub call: C,
}

impl<C: Call> Wrapped<C> {
    pub fn udf(inner: ScalarUDF, call: C) -> ScalarUDF {
        ScalarUDF::new_from_impl(Wrapped { inner, call })
    }
}

impl<C: Call> ScalarUDFImpl for Wrapped<C> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn aliases(&self) -> &[String] {
        self.inner.aliases()
    }

    fn signature(&self) -> &Signature {
        self.inner.signature()
    }

    fn return_type(&self, arg_types: &[DataType]) -> Result<DataType> {
        self.inner.return_type(arg_types)
    }

    fn return_field_from_args(&self, args: ReturnFieldArgs) -> Result<FieldRef> {
        self.inner.return_field_from_args(args)
    }

    fn coerce_types(&self, arg_types: &[DataType]) -> Result<Vec<DataType>> {
        self.inner.coerce_types(arg_types)
    }

    fn documentation(&self) -> Option<&Documentation> {
        self.inner.documentation()
    }

    fn short_circuits(&self) -> bool {
        self.inner.short_circuits()
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        self.call.call(&self.inner, args)
    }
}
