//! The quickstart's local services, on one loopback port: the in-memory
//! noteworx the tests use (seeded from `examples/notes.json`),
//! and `examples/pages/` served as web pages for `webfetch`.
//!
//! ```sh
//! cargo run --example local_services -- 8183
//! ```
//!
//! The notes token is the fake's fixed one; it is printed at start.
#![allow(clippy::unwrap_used, clippy::expect_used)]
// The example prints where it listens and the notes token.
#![allow(clippy::print_stdout, clippy::print_stderr)]
// The fake it serves is the tests'; its `pub` is theirs, not an API.
#![allow(unreachable_pub)]

#[allow(dead_code)]
#[path = "../tests/harness/common/fake_noteworx.rs"]
mod fake_noteworx;

use std::path::PathBuf;

use anyhow::Context;
use wiremock::matchers::{method, path_regex};
use wiremock::{Mock, Request, Respond, ResponseTemplate};

/// `GET /pages/NAME`: the file `examples/pages/NAME`.
struct Pages(PathBuf);

impl Respond for Pages {
    fn respond(&self, req: &Request) -> ResponseTemplate {
        let name = req.url.path().trim_start_matches("/pages/");
        if name.contains('/') || name.starts_with('.') {
            return ResponseTemplate::new(404);
        }
        let content_type = match name.rsplit_once('.').map(|(_, ext)| ext) {
            Some("html") => "text/html; charset=utf-8",
            Some("json") => "application/json",
            _ => "text/plain; charset=utf-8",
        };
        match std::fs::read(self.0.join(name)) {
            Ok(body) => ResponseTemplate::new(200).set_body_raw(body, content_type),
            Err(_) => ResponseTemplate::new(404),
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let port: u16 = match std::env::args().nth(1) {
        Some(p) => p.parse().context("the argument is a port number")?,
        None => 8183,
    };
    let examples = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples");
    let notes: Vec<serde_json::Value> =
        serde_json::from_slice(&std::fs::read(examples.join("notes.json"))?)
            .context("examples/notes.json")?;
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))
        .with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
    let notes_server = fake_noteworx::FakeNoteworx::start_on(listener, notes).await;
    Mock::given(method("GET"))
        .and(path_regex("^/pages/"))
        .respond_with(Pages(examples.join("pages")))
        .with_priority(1)
        .mount(&notes_server.server)
        .await;
    println!(
        "noteworx on {0} (token {1}); pages on {0}/pages/",
        notes_server.uri(),
        fake_noteworx::TOKEN
    );
    tokio::signal::ctrl_c().await?;
    Ok(())
}
