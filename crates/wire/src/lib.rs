//! The chat-completions wire format: the typed request and response
//! ([`chat`]) and reading a reply — thinking, text-form tool calls, cut
//! answers — and what of it is sent back ([`reply`]).

pub mod chat;
pub mod reply;
