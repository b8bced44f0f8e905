//! The durable plane: the app's message row and the protocol's chunk rows, and the SQL that
//! moves text into them. Nothing here performs I/O; the shell runs the statements.

pub mod databases;
pub mod mapping;
pub mod model;
pub mod plan;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod rows;
pub mod sql;
pub mod tables;

pub use databases::{Database, Databases, UnknownDatabase, DEFAULT_DATABASE};
pub use mapping::{ColumnNames, Ident, MappingError, TableMapping};
pub use plan::{Executed, StorePlan, TablesOp};
pub use rows::{judge_host, judge_probe, ColumnValue, OpenProbe, OpenRefused, RowState, UnusableRow};
pub use sql::{chunk_id, Dialect, MappedSql, Statement, Value, MAX_CHECKED_ANSWERS};
pub use tables::{durable_of_rows, ChatAnswer, Row, SqlExecutor, Tables};
