//! The ground floor: small helpers every room may use and none of which
//! knows the product — characters and lines ([`text`]), capped HTTP bodies
//! ([`http`]), reading server fields without building what is not kept
//! ([`lenient`]), opening named local files only when they are regular
//! ones ([`file`]), an opened folder that writes, moves and removes
//! without ever following a link ([`folder`]), the JSON Schemas final
//! answers must match ([`schema`]), and time zones read from the system's
//! tz database ([`zone`]).

pub mod file;
pub mod folder;
pub mod http;
pub mod lenient;
pub mod schema;
pub mod text;
pub mod zone;
