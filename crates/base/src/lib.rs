//! The ground floor: small helpers every room may use and none of which
//! knows the product — characters and lines ([`text`]), outbound HTTP
//! (the client, capped bodies, a failed request in words: [`http`]; a
//! retry policy: [`retry`]), an error's innermost cause ([`error`]), a
//! lock a panic does not spoil ([`sync`]), milliseconds ([`time`]),
//! reading server fields without building what is not kept
//! ([`lenient`]), opening named local files only when they are regular
//! ones ([`file`]), whose a file is and whether it may be trusted
//! ([`owner`]), an opened folder that writes, moves and removes
//! without ever following a link ([`folder`]), who holds a `flock`,
//! found without taking it ([`flock`]), the JSON Schemas final
//! answers must match ([`schema`]), time zones read from the system's tz
//! database ([`zone`]), and secrets kept out of what is written: the
//! redactor, in every spelling JSON allows, and the writer that passes
//! whole lines through it ([`redact`]).

pub mod error;
pub mod file;
pub mod flock;
pub mod folder;
pub mod http;
pub mod lenient;
pub mod owner;
pub mod redact;
pub mod retry;
pub mod schema;
pub mod sync;
pub mod text;
pub mod time;
pub mod zone;
