//! The ground floor: small helpers every room may use and none of which
//! knows the product — characters and lines ([`text`]), capped HTTP bodies
//! ([`http`]), reading server fields without building what is not kept
//! ([`lenient`]), opening named local files only when they are regular
//! ones ([`file`]), and the JSON Schemas final answers must match
//! ([`schema`]).

pub mod file;
pub mod http;
pub mod lenient;
pub mod schema;
pub mod text;
