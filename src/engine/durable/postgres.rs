//! How the plan's values travel to PostgreSQL and its rows come back, through tokio-postgres:
//! the one binding shared by the Worker's executor (`src/edge/store/postgres.rs`, async over a
//! `worker::Socket`) and the native tests' (`tests/support/pg.rs`, tokio-postgres's blocking
//! facade). Encoding only; no I/O here.
//!
//! Every value goes in **text format with the type `unknown`**, so the server infers each
//! parameter's type from where it stands, as node-postgres does: an app's `uuid` key, `integer`
//! length or enum status takes the value as a literal would (declaring `text`/`int8` fails there:
//! `operator does not exist: uuid = text`). Statements go through `query_typed`/`execute_typed`:
//! the unnamed statement, nothing prepared outlives it, which Hyperdrive's pooling needs. Rows
//! come back in binary and are read by type.

use super::sql::Value;
use super::tables::Row;
use super::ColumnValue;
use crate::engine::host::store::StoreError;
use bytes::BytesMut;
use std::error::Error as StdError;
use tokio_postgres::types::{Format, FromSql, IsNull, Kind, ToSql, Type};

/// A plan value as a parameter: text format, type `unknown`.
#[derive(Debug)]
pub struct Bound<'a>(&'a Value);

impl ToSql for Bound<'_> {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, Box<dyn StdError + Sync + Send>> {
        match self.0 {
            Value::Text(s) => out.extend_from_slice(s.as_bytes()),
            Value::Int(n) => out.extend_from_slice(n.to_string().as_bytes()),
            // `1`/`0`: the input of a boolean and of an integer flag column alike.
            Value::Bool(b) => out.extend_from_slice(if *b { b"1" } else { b"0" }),
            Value::Null => return Ok(IsNull::Yes),
        }
        Ok(IsNull::No)
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    fn encode_format(&self, _: &Type) -> Format {
        Format::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

/// The parameters of a statement, bound; hand [`typed`] of them to `query_typed`/`execute_typed`.
pub fn bind(params: &[Value]) -> Vec<Bound<'_>> {
    params.iter().map(Bound).collect()
}

/// Bound parameters as tokio-postgres's `(value, type)` pairs, every type `unknown`.
pub fn typed<'a>(bound: &'a [Bound<'a>]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    bound.iter().map(|b| (b as &(dyn ToSql + Sync), Type::UNKNOWN)).collect()
}

/// One column read back as the plan's [`ColumnValue`].
struct Cell(ColumnValue);

impl<'a> FromSql<'a> for Cell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Cell(match *ty {
            Type::INT2 => ColumnValue::Integer(i16::from_sql(ty, raw)?.into()),
            Type::INT4 => ColumnValue::Integer(i32::from_sql(ty, raw)?.into()),
            Type::INT8 => ColumnValue::Integer(i64::from_sql(ty, raw)?),
            Type::BOOL => ColumnValue::Integer(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT4 => ColumnValue::Real(f32::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => ColumnValue::Real(f64::from_sql(ty, raw)?),
            _ if matches!(ty.kind(), Kind::Enum(_)) || <&str as FromSql>::accepts(ty) => {
                ColumnValue::Text(std::str::from_utf8(raw)?.to_owned())
            }
            _ => return Err(format!("a column of type {ty} is not one the plan reads").into()),
        }))
    }

    fn from_sql_null(_: &Type) -> Result<Self, Box<dyn StdError + Sync + Send>> {
        Ok(Cell(ColumnValue::Null))
    }

    fn accepts(_: &Type) -> bool {
        true
    }
}

/// A row as the engine reads rows. A column of a type the plan does not read is
/// [`StoreError::NotCommitted`]; a caller that read it after a commit says otherwise.
pub fn row(r: &tokio_postgres::Row) -> Result<Row, StoreError> {
    let columns = r.columns().iter().enumerate().map(|(i, c)| Ok((c.name().to_owned(), r.try_get::<_, Cell>(i).map_err(failed)?.0)));
    columns.collect::<Result<_, _>>().map(Row::new)
}

/// A failed statement: its transaction rolled back (or it was a read), nothing committed. The
/// server turning it away for load (SQLSTATE 53300, 53400) is an overload.
pub fn failed(e: tokio_postgres::Error) -> StoreError {
    StoreError::from_database(describe(&e), false)
}

/// A failed `COMMIT`: the server's refusal rolled the transaction back, but a connection that
/// broke while the commit was sent leaves its outcome unknown.
pub fn failed_commit(e: tokio_postgres::Error) -> StoreError {
    match e.as_db_error() {
        Some(_) => failed(e),
        None => StoreError::MayHaveCommitted(describe(&e)),
    }
}

/// The server's SQLSTATE and message, or the client's error.
pub fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}
